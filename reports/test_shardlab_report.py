"""Tests for shardlab_report.py, on the fixtures in testdata/ (see FORMATS.md).

Run: MPLBACKEND=Agg /usr/bin/python3 -m unittest -v test_shardlab_report   (from reports/)
or through ctest (`ctest -R report`), which sets PYTHONPATH to this folder.
"""

import contextlib
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import shardlab_report  # noqa: E402

SCRIPT = os.path.join(HERE, "shardlab_report.py")
RUN_FSDP = os.path.join(HERE, "testdata", "run_fsdp")
SWEEP = os.path.join(HERE, "testdata", "sweep")
SINGLE_RUN_PICTURES = ["timeline.png", "memory.png", "step_breakdown.png", "loss.png"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run_main(*args):
    """Runs the script's main in this process; returns (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = shardlab_report.main(list(args))
        except SystemExit as e:  # argparse
            rc = e.code
    return rc, out.getvalue(), err.getvalue()


def png_size(path):
    """(width, height) from the IHDR chunk, after checking the PNG signature and IEND."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == PNG_MAGIC, f"{path}: not a PNG"
    assert data[12:16] == b"IHDR", f"{path}: no IHDR chunk"
    assert data[-12:-4] == b"\x00\x00\x00\x00IEND", f"{path}: truncated (no IEND)"
    return struct.unpack(">II", data[16:24])


class TempDirTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="shardlab_report_test_")
        self.tmp = self._tmp.name

    def tearDown(self):
        self._tmp.cleanup()

    def path(self, *parts):
        return os.path.join(self.tmp, *parts)

    def copy_run(self, src=RUN_FSDP, name="run"):
        dst = self.path(name)
        shutil.copytree(src, dst)
        return dst

    def assert_picture(self, path, min_bytes=8000):
        self.assertTrue(os.path.isfile(path), f"{path} was not written")
        width, height = png_size(path)
        self.assertGreaterEqual(width, 400, path)
        self.assertGreaterEqual(height, 200, path)
        self.assertGreater(os.path.getsize(path), min_bytes, f"{path} is suspiciously small")
        with open(path, "rb") as f:
            self.assertNotIn(b"Software", f.read(), f"{path} carries Software metadata")

    def read(self, *parts):
        with open(self.path(*parts), encoding="utf-8") as f:
            return f.read()

    def assert_bad_input(self, args, *expected_in_message):
        rc, _, err = run_main(*args)
        self.assertEqual(rc, 2, f"exit code for {args}; stderr: {err}")
        self.assertNotIn("Traceback", err)
        self.assertEqual(len(err.strip().splitlines()), 1, f"one message expected, got: {err}")
        for text in expected_in_message:
            self.assertIn(text, err)
        return err


class SingleRunTest(TempDirTest):
    def test_writes_every_picture_and_an_index_that_shows_them(self):
        out = self.path("out")
        rc, stdout, err = run_main(RUN_FSDP, "--out", out)
        self.assertEqual(rc, 0, err)
        for name in SINGLE_RUN_PICTURES:
            self.assert_picture(os.path.join(out, name))
            self.assertIn(f'<img src="{name}"', self.read("out", "index.html"))
        self.assertFalse(os.path.exists(os.path.join(out, "scaling.png")), "scaling is for sweeps only")
        self.assertEqual(png_size(os.path.join(out, "timeline.png"))[0], 1200)  # 12 in at 100 dpi
        self.assertIn("index.html", stdout)

    def test_index_summarises_metrics_and_embeds_summary_txt(self):
        out = self.path("out")
        self.assertEqual(run_main(RUN_FSDP, "--out", out)[0], 0)
        page = self.read("out", "index.html")
        for text in ("bert_tiny_fsdp_w3", "FULL_SHARD", "1.027 ms", "40.79 MiB", "bitwise equal",
                     "peak_memory_bytes &lt; 64 MiB", "<h2>summary.txt</h2>", "simulated step time",
                     "<th>device</th><td>gaudi2 (simulated)</td>", "alpha_beta model, auto collectives",
                     "<th>produced by</th><td>shardlab v0-fixture on fixture-host</td>"):
            self.assertIn(text, page)
        self.assertNotIn(self.tmp, page, "index.html must not hold absolute paths")

    def test_timeline_shows_the_last_step_and_all_ranks(self):
        out = self.path("out")
        self.assertEqual(run_main(RUN_FSDP, "--out", out)[0], 0)
        self.assertIn("step 3 (the last of steps 1–3)", self.read("out", "index.html"))
        self.assertIn("all 3 ranks", self.read("out", "index.html"))

    def test_a_host_bound_run_shows_its_host_bound_part(self):
        # Timing mode under a software stack: metrics add step_breakdown_s.host_bound; the
        # index and the breakdown picture show it, and runs without it are drawn as before.
        run = self.copy_run()
        metrics_path = os.path.join(run, "metrics.json")
        with open(metrics_path) as f:
            m = json.load(f)
        self.assertNotIn("host_bound", m["step_breakdown_s"])
        self.assertEqual(shardlab_report.breakdown_parts([m]), shardlab_report.BREAKDOWN_PARTS)
        m["step_breakdown_s"]["host_bound"] = 0.0007
        m["host_bound_s_per_step"] = [0.0007, 0.0007]
        with open(metrics_path, "w") as f:
            json.dump(m, f)
        self.assertEqual(shardlab_report.breakdown_parts([m])[-1][0], "host_bound")
        out = self.path("out")
        self.assertEqual(run_main(run, "--out", out)[0], 0)
        self.assertIn("host-bound (device waiting for its host) 0.700 ms", self.read("out", "index.html"))
        self.assert_picture(os.path.join(out, "step_breakdown.png"))

    def test_loss_note_says_bitwise_equal_to_oracle(self):
        out = self.path("out")
        self.assertEqual(run_main(RUN_FSDP, "--out", out)[0], 0)
        self.assertIn("loss bitwise equal to the unsharded oracle at all 3 steps", self.read("out", "index.html"))

    def test_loss_note_gives_the_difference_when_not_bitwise_equal(self):
        run = self.copy_run()
        with open(os.path.join(run, "loss.csv"), "w") as f:
            f.write("step,loss,oracle_loss\n1,2.5,2.5\n2,2.25,2.2500001\n")
        self.assertEqual(run_main(run)[0], 0)
        page = self.read("run", "index.html")
        self.assertIn("max |loss − oracle| = 1e-07", page)
        self.assertNotIn("loss bitwise equal", page)

    def test_default_output_folder_is_the_run_folder(self):
        run = self.copy_run()
        rc, _, err = run_main(run)
        self.assertEqual(rc, 0, err)
        for name in SINGLE_RUN_PICTURES + ["index.html"]:
            self.assertTrue(os.path.isfile(os.path.join(run, name)), name)

    def test_draws_only_pictures_whose_input_exists(self):
        run = self.path("bare")
        os.makedirs(run)
        with open(os.path.join(run, "metrics.json"), "w") as f:
            json.dump({"scenario": "bare", "world_size": 2, "status": "peer crashed at step 2"}, f)
        rc, _, err = run_main(run)
        self.assertEqual(rc, 0, err)
        self.assertEqual(sorted(os.listdir(run)), ["index.html", "metrics.json"])
        page = self.read("bare", "index.html")
        self.assertIn("no trace.json", page)
        self.assertIn("peer crashed at step 2", page)

    def test_timeline_of_a_wide_world_shows_at_most_16_ranks_and_says_which(self):
        run = self.path("wide")
        os.makedirs(run)
        with open(os.path.join(run, "metrics.json"), "w") as f:
            json.dump({"scenario": "wide", "world_size": 20}, f)
        events = []
        for rank in range(20):
            for step in (1, 2):
                t = (step - 1) * 1000
                events.append({"ph": "X", "pid": rank, "tid": 0, "ts": t + 100, "dur": 500, "name": "forward",
                               "cat": "fsdp", "args": {"unit": 0, "step": step}})
                events.append({"ph": "X", "pid": rank, "tid": 1, "ts": t, "dur": 100, "name": "all_gather",
                               "cat": "comm", "args": {"bytes": 64, "algorithm": "ring", "group": "world"}})
        with open(os.path.join(run, "trace.json"), "w") as f:
            json.dump({"traceEvents": events, "displayTimeUnit": "ms"}, f)
        rc, _, err = run_main(run)
        self.assertEqual(rc, 0, err)
        self.assert_picture(os.path.join(run, "timeline.png"))
        self.assertIn("16 of 20 ranks shown (0, 1, 3, 4, 5, 6, 8, 9, 10, 11, 13, 14, 15, 16, 18, 19)",
                      self.read("wide", "index.html"))

    def test_trace_without_step_numbers_is_drawn_whole(self):
        run = self.copy_run()
        with open(os.path.join(run, "trace.json"), "w") as f:
            json.dump({"traceEvents": [
                {"ph": "X", "pid": 0, "tid": 0, "ts": 0, "dur": 40, "name": "matmul", "cat": "compute"},
                {"ph": "X", "pid": 1, "tid": 3, "ts": 10, "dur": 20, "name": "all_reduce", "cat": "comm"},
                {"ph": "i", "pid": 0, "tid": 0, "ts": 5, "name": "instant events are ignored"}]}, f)
        self.assertEqual(run_main(run)[0], 0)
        self.assertIn("the whole trace", self.read("run", "index.html"))


class SweepTest(TempDirTest):
    def test_sweep_writes_comparisons_and_a_report_per_run(self):
        out = self.path("out")
        rc, _, err = run_main(SWEEP, "--out", out)
        self.assertEqual(rc, 0, err)
        for name in ("scaling.png", "step_breakdown.png", "loss.png"):
            self.assert_picture(os.path.join(out, name))
            self.assertIn(f'<img src="{name}"', self.read("out", "index.html"))
        page = self.read("out", "index.html")
        for run in ("fsdp_w2", "fsdp_w4", "shard_grad_op_w4"):
            self.assertIn(f'href="{run}/index.html"', page)
            self.assertTrue(os.path.isfile(os.path.join(out, run, "index.html")))
            self.assert_picture(os.path.join(out, run, "step_breakdown.png"))
            self.assert_picture(os.path.join(out, run, "loss.png"))
            self.assertFalse(os.path.exists(os.path.join(out, run, "timeline.png")), "no trace.json there")
        self.assertIn("world sizes 2, 4 and strategies FULL_SHARD, SHARD_GRAD_OP", page)
        # The table says what each run was: model, device, world size, strategy.
        self.assertIn("<th>model</th><th>device</th><th>world size</th><th>strategy</th>", page)
        self.assertIn("<td>bert-tiny mlm</td><td>gaudi2 (simulated)</td><td>2</td><td>FULL_SHARD</td>", page)
        # Runs are ordered by world size, then strategy.
        self.assertLess(page.index("bert_tiny_fsdp_w2"), page.index("bert_tiny_fsdp_w4"))
        self.assertLess(page.index("bert_tiny_fsdp_w4"), page.index("bert_tiny_shard_grad_op_w4"))

    def _sweep_of(self, variants):
        """A sweep folder of copies of fsdp_w4 with metrics.json fields overridden."""
        root = self.path("sweep")
        for name, overrides in variants.items():
            dst = os.path.join(root, name)
            shutil.copytree(os.path.join(SWEEP, "fsdp_w4"), dst)
            with open(os.path.join(dst, "metrics.json")) as f:
                m = json.load(f)
            for key, value in overrides.items():
                if key == "strategy":
                    m["fsdp"]["sharding_strategy"] = value
                else:
                    m[key] = value
            m["scenario"] = name
            with open(os.path.join(dst, "metrics.json"), "w") as f:
                json.dump(m, f)
        return root

    def test_scaling_by_world_size_only(self):
        root = self._sweep_of({"w8": {"world_size": 8, "samples_per_s": 12000.0},
                               "w16": {"world_size": 16, "samples_per_s": 20000.0},
                               "w2": {"world_size": 2, "samples_per_s": 4000.0}})
        self.assertEqual(run_main(root)[0], 0)
        self.assert_picture(os.path.join(root, "scaling.png"))
        page = self.read("sweep", "index.html")
        self.assertIn("world sizes 2, 8, 16;", page)
        self.assertNotIn("strategies", page)

    def test_scaling_by_strategy_only(self):
        root = self._sweep_of({"full": {"strategy": "FULL_SHARD"}, "none": {"strategy": "NO_SHARD"},
                               "hybrid": {"strategy": "HYBRID_SHARD"}})
        self.assertEqual(run_main(root)[0], 0)
        self.assert_picture(os.path.join(root, "scaling.png"))
        self.assertIn("strategies FULL_SHARD, HYBRID_SHARD, NO_SHARD;", self.read("sweep", "index.html"))

    def test_no_scaling_when_runs_share_world_size_and_strategy(self):
        root = self._sweep_of({"a": {"seed": 1}, "b": {"seed": 2}})
        self.assertEqual(run_main(root)[0], 0)
        self.assertFalse(os.path.exists(os.path.join(root, "scaling.png")))
        self.assertIn("share one world size and one sharding strategy", self.read("sweep", "index.html"))

    def test_runs_with_the_same_scenario_name_are_told_apart_by_folder(self):
        root = self._sweep_of({"a": {"world_size": 2}, "b": {"world_size": 4}})
        for name in ("a", "b"):
            p = os.path.join(root, name, "metrics.json")
            with open(p) as f:
                m = json.load(f)
            m["scenario"] = "same"
            with open(p, "w") as f:
                json.dump(m, f)
        self.assertEqual(run_main(root)[0], 0)
        page = self.read("sweep", "index.html")
        self.assertIn("same (a)", page)
        self.assertIn("same (b)", page)


class DeterminismTest(TempDirTest):
    def _outputs(self, folder):
        found = {}
        for dirpath, _, files in os.walk(folder):
            for name in files:
                if name.endswith((".png", ".html")):
                    p = os.path.join(dirpath, name)
                    with open(p, "rb") as f:
                        found[os.path.relpath(p, folder)] = f.read()
        return found

    def test_two_runs_give_byte_identical_files(self):
        for src, count in ((RUN_FSDP, 5), (SWEEP, 13)):
            with self.subTest(src=os.path.basename(src)):
                a, b, c = (self.path(os.path.basename(src), n) for n in "abc")
                self.assertEqual(run_main(src, "--out", a)[0], 0)
                self.assertEqual(run_main(src, "--out", b)[0], 0)
                # A fresh interpreter, too: nothing may depend on state left in this one.
                env = dict(os.environ, MPLBACKEND="Agg")
                proc = subprocess.run([sys.executable, SCRIPT, src, "--out", c], env=env,
                                      capture_output=True, text=True, timeout=240)
                self.assertEqual(proc.returncode, 0, proc.stderr)
                first = self._outputs(a)
                self.assertEqual(len(first), count, sorted(first))
                for other in (b, c):
                    second = self._outputs(other)
                    self.assertEqual(sorted(first), sorted(second))
                    for name in first:
                        self.assertEqual(first[name], second[name], f"{name} differs between runs")


class BadInputTest(TempDirTest):
    def write(self, run, name, text):
        with open(os.path.join(run, name), "w", encoding="utf-8") as f:
            f.write(text)
        return os.path.join(run, name)

    def test_missing_dir(self):
        missing = self.path("no_such_dir")
        self.assert_bad_input([missing], missing, "no such directory")

    def test_dir_without_metrics_json(self):
        os.makedirs(self.path("empty", "sub"))
        self.assert_bad_input([self.path("empty")], self.path("empty"), "no metrics.json")

    def test_metrics_json_that_is_not_json(self):
        run = self.copy_run()
        p = self.write(run, "metrics.json", '{"scenario": "x",\n "world_size": }')
        self.assert_bad_input([run], p + ":2:16", "invalid JSON")

    def test_metrics_json_with_a_wrong_type(self):
        run = self.copy_run()
        p = self.write(run, "metrics.json", json.dumps({"scenario": "x", "step_time_s": {"median": "fast"}}))
        self.assert_bad_input([run], p, "'step_time_s.median'", "expected a number or null, got a string")

    def test_metrics_json_that_is_not_an_object(self):
        run = self.copy_run()
        p = self.write(run, "metrics.json", "[1, 2]")
        self.assert_bad_input([run], p, "expected a JSON object, got a list")

    def test_metrics_json_breakdown_missing_a_part(self):
        run = self.copy_run()
        p = self.write(run, "metrics.json", json.dumps({"step_breakdown_s": {"compute": 1.0, "idle": 0.0}}))
        self.assert_bad_input([run], p, "missing 'exposed_comm'")

    def test_trace_with_a_bad_event(self):
        run = self.copy_run()
        with open(os.path.join(RUN_FSDP, "trace.json")) as f:
            trace = json.load(f)
        trace["traceEvents"][20]["dur"] = -5
        p = self.write(run, "trace.json", json.dumps(trace))
        self.assert_bad_input([run], p, "traceEvents[20]", "'dur'", "-5")

    def test_trace_event_without_pid(self):
        run = self.copy_run()
        p = self.write(run, "trace.json", '{"traceEvents": [{"ph": "X", "tid": 0, "ts": 0, "dur": 1}]}')
        self.assert_bad_input([run], p, "traceEvents[0]", "'pid'")

    def test_trace_without_trace_events(self):
        run = self.copy_run()
        p = self.write(run, "trace.json", '{"displayTimeUnit": "ms"}')
        self.assert_bad_input([run], p, "traceEvents")

    def test_memory_csv_with_a_negative_byte_count(self):
        run = self.copy_run()
        header = ",".join(shardlab_report.MEMORY_COLUMNS)
        p = self.write(run, "memory.csv", header + "\n0,1,pre_forward:0,0.0001,10,0,0,0,0,0\n"
                       "0,1,post_forward:0,0.0002,10,0,0,-4,0,0\n")
        self.assert_bad_input([run], p + ":3", "activations '-4'")

    def test_memory_csv_with_a_wrong_header(self):
        run = self.copy_run()
        p = self.write(run, "memory.csv", "rank,step,time_s\n0,1,0.5\n")
        self.assert_bad_input([run], p + ":1", "header lacks event")

    def test_loss_csv_with_a_bad_value(self):
        run = self.copy_run()
        p = self.write(run, "loss.csv", "step,loss,oracle_loss\n1,2.5,\n2,two,\n")
        self.assert_bad_input([run], p + ":3", "loss 'two' is not a number")

    def test_loss_csv_with_a_short_row(self):
        run = self.copy_run()
        p = self.write(run, "loss.csv", "step,loss,oracle_loss\n1,2.5\n")
        self.assert_bad_input([run], p + ":2", "2 fields, the header has 3")

    def test_a_bad_run_in_a_sweep_is_named(self):
        root = self.path("sweep")
        shutil.copytree(SWEEP, root)
        p = self.write(os.path.join(root, "fsdp_w4"), "loss.csv", "")
        self.assert_bad_input([root], p, "empty file")

    def test_unwritable_output(self):
        blocker = self.path("file")
        with open(blocker, "w") as f:
            f.write("x")
        self.assert_bad_input([RUN_FSDP, "--out", blocker], blocker, "cannot create the output folder")

    def test_command_line_exit_code_and_no_traceback(self):
        run = self.copy_run()
        self.write(run, "trace.json", '{"traceEvents": [{"ph": "X", "pid": 0, "tid": 0, "ts": "soon", "dur": 1}]}')
        proc = subprocess.run([sys.executable, SCRIPT, run], env=dict(os.environ, MPLBACKEND="Agg"),
                              capture_output=True, text=True, timeout=120)
        self.assertEqual(proc.returncode, 2)
        self.assertNotIn("Traceback", proc.stderr)
        self.assertIn(os.path.join(run, "trace.json"), proc.stderr)
        self.assertIn("'ts'", proc.stderr)


class HelperTest(unittest.TestCase):
    def test_pick_evenly_keeps_first_and_last(self):
        self.assertEqual(shardlab_report.pick_evenly(list(range(5)), 16), [0, 1, 2, 3, 4])
        picked = shardlab_report.pick_evenly(list(range(65536)), 16)
        self.assertEqual(len(picked), 16)
        self.assertEqual((picked[0], picked[-1]), (0, 65535))

    def test_bitwise_equal_tells_negative_zero_apart(self):
        self.assertTrue(shardlab_report.bitwise_equal(0.1 + 0.2, 0.30000000000000004))
        self.assertFalse(shardlab_report.bitwise_equal(0.0, -0.0))

    def test_byte_units(self):
        self.assertEqual(shardlab_report.fmt_bytes(512), "512 bytes")
        self.assertEqual(shardlab_report.fmt_bytes(42775962), "40.79 MiB")
        self.assertEqual(shardlab_report.fmt_bytes(3 * 2 ** 30), "3.00 GiB")


if __name__ == "__main__":
    unittest.main()

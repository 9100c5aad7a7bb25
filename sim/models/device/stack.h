// Software stacks: how the framework drives the device (world.stack), as data files beside
// the device and topology profiles (sim/profiles/stacks/*.json, compiled in like them; a
// scenario may also name a path). The numbers and their sources are in
// sim/profiles/README.md ("Software stacks").
//
// NOTE [Software stack]
// The device profile times what the device does; the stack says what the host does to
// make it do it, and what a graph compiler changes on the device:
//  - execution `ideal`: no host time; host and device are one timeline, each op starts
//    when the previous one ends (the simulator before stacks; every golden made on it).
//  - execution `eager`: the host dispatches every op (op_dispatch_ns each) and the device
//    runs it once dispatched and once the previous op is done.
//  - execution `lazy` / `compiled`: the host records ops into a graph (op_dispatch_ns
//    each; 0 when a compiled region replays without tracing) and launches the graph
//    (graph_launch_ns) where the graph breaks: at the FSDP hooks, which issue or wait for
//    a collective (a collective needs its input materialized), and at the step's end.
//    Inside a graph the device runs each node for graph_node_ns instead of the profile's
//    launch_ns, transposes that only feed a matrix op are folded into its operand reads
//    (fold_transposes), and an element-wise op reading what the op before it just wrote
//    gets that operand from on-chip memory (fuse_elementwise).
//  - fsdp_hook_ns: the host time of an FSDP hook (pre-forward / pre-backward unshard,
//    post-backward reduce), charged before each collective the runtime issues.
//  - host_device_overlap: the host runs ahead of the device (an accelerator's queue);
//    off, the host waits for each op or graph to finish.
// With a stack other than ideal the timing-mode replay keeps two timelines per rank, the
// host's and the device's (sim/timing/replay.h); the step is host-bound where the device
// waits for the host.
//
// Thread safety: plain values; load functions are pure.
#pragma once

#include <string>
#include <vector>

#include "runtime/core/clock.h"
#include "runtime/core/status.h"

namespace shardlab::sim {

enum class StackExecution { kIdeal, kEager, kLazy, kCompiled };
const char* stack_execution_name(StackExecution e);

struct SoftwareStack {
  std::string name = "ideal";
  std::string description;
  StackExecution execution = StackExecution::kIdeal;
  Nanos op_dispatch_ns = 0;   // host, per op dispatched (eager) or recorded (lazy, compiled)
  Nanos graph_launch_ns = 0;  // host, per graph launch (lazy, compiled)
  Nanos fsdp_hook_ns = 0;     // host, per collective the FSDP runtime issues
  bool host_device_overlap = false;
  Nanos graph_node_ns = 0;  // device, per op inside a graph (lazy, compiled)
  bool fold_transposes = false;
  bool fuse_elementwise = false;

  bool ideal() const { return execution == StackExecution::kIdeal; }
  bool graphs() const { return execution == StackExecution::kLazy || execution == StackExecution::kCompiled; }
  friend bool operator==(const SoftwareStack&, const SoftwareStack&) = default;
};

// Built-in stack names (sorted), as the files under sim/profiles/stacks/ name them.
std::vector<std::string> list_stacks();
// A built-in stack by name, or a JSON file by path (anything containing a '/' or ending in
// ".json"); INVALID_ARGUMENT naming the file, the key and what is allowed.
Result<SoftwareStack> load_stack(const std::string& name_or_path);
Result<SoftwareStack> parse_stack(const std::string& json_text, const std::string& origin);
std::string stack_to_json(const SoftwareStack& stack);

}  // namespace shardlab::sim

#include "sim/models/device/stack.h"

#include "sim/models/device/profile_json.h"
#include "sim/models/device/profiles.h"

namespace shardlab::sim {

const char* stack_execution_name(StackExecution e) {
  switch (e) {
    case StackExecution::kIdeal: return "ideal";
    case StackExecution::kEager: return "eager";
    case StackExecution::kLazy: return "lazy";
    case StackExecution::kCompiled: return "compiled";
  }
  return "?";
}

std::vector<std::string> list_stacks() { return detail::builtin_names("stacks"); }

Result<SoftwareStack> load_stack(const std::string& name_or_path) {
  std::string origin;
  SHARDLAB_ASSIGN_OR_RETURN(std::string text, detail::read_profile("stacks", name_or_path, &origin));
  return parse_stack(text, origin);
}

Result<SoftwareStack> parse_stack(const std::string& json_text, const std::string& origin) {
  SHARDLAB_ASSIGN_OR_RETURN(nlohmann::json j, detail::JsonObject::parse(json_text, origin));
  detail::JsonObject root(j, origin);
  SHARDLAB_RETURN_IF_ERROR(
      root.only({"name", "description", "execution", "op_dispatch_ns", "graph_launch_ns", "fsdp_hook_ns",
                 "host_device_overlap", "graph_node_ns", "fold_transposes", "fuse_elementwise", "notes"}));
  SHARDLAB_RETURN_IF_ERROR(root.notes_ok("notes"));
  SoftwareStack s;
  SHARDLAB_ASSIGN_OR_RETURN(s.name, root.string("name", true));
  if (s.name.empty()) return root.bad("name", "must not be empty");
  SHARDLAB_ASSIGN_OR_RETURN(s.description, root.string("description", false));
  SHARDLAB_ASSIGN_OR_RETURN(const std::string execution, root.string("execution", true));
  bool known = false;
  for (StackExecution e :
       {StackExecution::kIdeal, StackExecution::kEager, StackExecution::kLazy, StackExecution::kCompiled}) {
    if (execution == stack_execution_name(e)) {
      s.execution = e;
      known = true;
    }
  }
  if (!known)
    return root.bad("execution", "'" + execution + "' is not an execution; allowed: ideal, eager, lazy, compiled");
  SHARDLAB_ASSIGN_OR_RETURN(s.op_dispatch_ns, root.nanos("op_dispatch_ns", 0));
  SHARDLAB_ASSIGN_OR_RETURN(s.graph_launch_ns, root.nanos("graph_launch_ns", 0));
  SHARDLAB_ASSIGN_OR_RETURN(s.fsdp_hook_ns, root.nanos("fsdp_hook_ns", 0));
  SHARDLAB_ASSIGN_OR_RETURN(s.graph_node_ns, root.nanos("graph_node_ns", 0));
  SHARDLAB_ASSIGN_OR_RETURN(s.host_device_overlap, root.boolean_or("host_device_overlap", false));
  SHARDLAB_ASSIGN_OR_RETURN(s.fold_transposes, root.boolean_or("fold_transposes", false));
  SHARDLAB_ASSIGN_OR_RETURN(s.fuse_elementwise, root.boolean_or("fuse_elementwise", false));
  // What only a graph has, refused elsewhere rather than silently ignored.
  if (!s.graphs()) {
    for (const char* key : {"graph_launch_ns", "graph_node_ns", "fold_transposes", "fuse_elementwise"}) {
      if (root.has(key)) {
        return root.bad(
            key, std::string("only a graph-building execution (lazy, compiled) has it; this stack's is ") + execution);
      }
    }
  }
  if (s.ideal()) {
    for (const char* key : {"op_dispatch_ns", "fsdp_hook_ns", "host_device_overlap"}) {
      if (root.has(key)) return root.bad(key, "the ideal execution has no host time; allowed: leave it out");
    }
  }
  return s;
}

std::string stack_to_json(const SoftwareStack& s) {
  nlohmann::ordered_json j;
  j["name"] = s.name;
  if (!s.description.empty()) j["description"] = s.description;
  j["execution"] = stack_execution_name(s.execution);
  if (!s.ideal()) {
    j["op_dispatch_ns"] = s.op_dispatch_ns;
    j["fsdp_hook_ns"] = s.fsdp_hook_ns;
    j["host_device_overlap"] = s.host_device_overlap;
  }
  if (s.graphs()) {
    j["graph_launch_ns"] = s.graph_launch_ns;
    j["graph_node_ns"] = s.graph_node_ns;
    j["fold_transposes"] = s.fold_transposes;
    j["fuse_elementwise"] = s.fuse_elementwise;
  }
  return j.dump(2) + "\n";
}

}  // namespace shardlab::sim

#include "passes/dot.h"

#include <sstream>

#include "ops/fusion/fused_group.h"

namespace weft {

namespace {

// `s` as a DOT string: quotes and backslashes escaped, line breaks as DOT's "\n".
std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

const FusedGroup* GroupOf(const Node& node) {
  if (node.is_variable() || node.op->name != "_fused_pointwise") return nullptr;
  return node.attrs.Get<FusedParam>().group.get();
}

class DotWriter {
 public:
  DotWriter(const Graph& g, std::ostream& os) : g_(g), os_(os) {}

  void Write(Device device, const std::string& title, const std::vector<DotSegment>& segments) {
    os_ << "digraph weft {\n  label=" << Quote(title + " on " + device.ToString() + Summary())
        << ";\n  labelloc=t;\n  node [shape=box, fontname=Helvetica, fontsize=10];\n"
        << "  edge [fontname=Helvetica, fontsize=8];\n";
    std::vector<bool> written(g_.nodes().size(), false);
    for (size_t s = 0; s < segments.size(); ++s) WriteSegment(s, segments[s], written);
    for (uint32_t n = 0; n < g_.nodes().size(); ++n) {
      if (!written[n]) WriteNode(n, "  ");
    }
    WriteEdges();
    os_ << "}\n";
  }

 private:
  // ": 12 nodes; plan 3 buffers, 1024 bytes (naive 4096)".
  std::string Summary() const {
    std::ostringstream os;
    os << ": " << g_.nodes().size() << " nodes";
    if (!g_.has_memory_plan()) return os.str();
    const MemoryPlan& plan = g_.memory();
    os << "; plan " << plan.storage_bytes.size() << " buffers, " << plan.total_bytes
       << " bytes (naive " << plan.naive_bytes << ")";
    return os.str();
  }

  void WriteSegment(size_t s, const DotSegment& segment, std::vector<bool>& written) {
    os_ << "  subgraph cluster_segment_" << s << " {\n    label="
        << Quote("segment " + std::to_string(s) + (segment.backward ? " (backward)" : ""))
        << ";\n    style=dashed;\n    color=" << (segment.backward ? "darkorange" : "steelblue")
        << ";\n";
    for (uint32_t n : segment.nodes) {
      WriteNode(n, "    ");
      written[n] = true;
    }
    os_ << "  }\n";
  }

  void WriteNode(uint32_t n, const std::string& indent) {
    const Node& node = g_.node(n);
    if (const FusedGroup* group = GroupOf(node)) return WriteGroup(n, *group, indent);
    os_ << indent << "n" << n << " [label=" << Quote(node.name + "\n" + OpName(node));
    if (node.is_variable()) os_ << ", shape=ellipse";
    os_ << "];\n";
  }

  static std::string OpName(const Node& node) {
    return node.is_variable() ? "argument" : node.op->name;
  }

  // A cluster per fused node, its steps inside, with the edges between them.
  void WriteGroup(uint32_t n, const FusedGroup& group, const std::string& indent) {
    os_ << indent << "subgraph cluster_fused_" << n << " {\n"
        << indent << "  label=" << Quote(g_.node(n).name + "\n" + group.label) << ";\n"
        << indent << "  style=filled;\n"
        << indent << "  fillcolor=lightyellow;\n";
    for (size_t k = 0; k < group.steps.size(); ++k) {
      os_ << indent << "  " << StepId(n, k)
          << " [label=" << Quote(group.steps[k].name + "\n" + group.steps[k].op->name) << "];\n";
    }
    const std::vector<int> producer = group.Producers();
    for (size_t k = 0; k < group.steps.size(); ++k) {
      for (uint32_t v : group.steps[k].args) {
        if (producer[v] >= 0)
          os_ << indent << "  " << StepId(n, producer[v]) << " -> " << StepId(n, k) << ";\n";
      }
    }
    os_ << indent << "}\n";
  }

  static std::string StepId(uint32_t n, size_t k) {
    return "n" + std::to_string(n) + "s" + std::to_string(k);
  }

  // Where entry e is drawn from: its node, or the step of a fused node that computes it.
  std::string From(NodeEntry e) const {
    const FusedGroup* group = GroupOf(g_.node(e.node));
    if (group == nullptr) return "n" + std::to_string(e.node);
    return StepId(e.node, group->Producers()[group->outputs[e.index]]);
  }

  // What reads input i of node n: the node, or the steps of a fused node that read it.
  std::vector<std::string> To(uint32_t n, size_t i) const {
    const FusedGroup* group = GroupOf(g_.node(n));
    if (group == nullptr) return {"n" + std::to_string(n)};
    std::vector<std::string> readers;
    for (size_t k = 0; k < group->steps.size(); ++k) {
      for (uint32_t v : group->steps[k].args) {
        if (v == i) {
          readers.push_back(StepId(n, k));
          break;
        }
      }
    }
    return readers;
  }

  // The edge attributes of entry e: its buffer (with a plan), shape and dtype.
  std::string EdgeAttrs(NodeEntry entry) const {
    const uint32_t e = g_.EntryId(entry);
    std::ostringstream label, tooltip;
    tooltip << "entry " << e;
    if (g_.has_memory_plan()) {
      const int id = g_.memory().storage_id[e];
      const std::string buffer =
          id == MemoryPlan::kExternal ? std::string("user array") : "buf " + std::to_string(id);
      label << buffer << (id != MemoryPlan::kExternal && g_.memory().inplace[e] ? " in place" : "")
            << "\n";
      tooltip << ": " << buffer;
    }
    if (g_.has_types()) label << g_.shapes()[e] << " " << g_.dtypes()[e];
    return "[label=" + Quote(label.str()) + ", tooltip=" + Quote(tooltip.str()) + "]";
  }

  void WriteEdges() {
    for (uint32_t n = 0; n < g_.nodes().size(); ++n) {
      const Node& node = g_.node(n);
      for (size_t i = 0; i < node.inputs.size(); ++i) {
        for (const std::string& to : To(n, i)) {
          os_ << "  " << From(node.inputs[i]) << " -> " << to << " " << EdgeAttrs(node.inputs[i])
              << ";\n";
        }
      }
    }
    for (size_t o = 0; o < g_.outputs().size(); ++o) {
      const bool forward = o < g_.num_forward_outputs();
      os_ << "  out" << o << " [shape=plaintext, label="
          << Quote("output " + std::to_string(o) + (forward ? "" : " (backward)")) << "];\n  "
          << From(g_.outputs()[o]) << " -> out" << o << " " << EdgeAttrs(g_.outputs()[o]) << ";\n";
    }
  }

  const Graph& g_;
  std::ostream& os_;
};

}  // namespace

std::string GraphToDot(const Graph& graph, Device device, const std::string& title,
                       const std::vector<DotSegment>& segments) {
  std::ostringstream os;
  DotWriter(graph, os).Write(device, title, segments);
  return os.str();
}

}  // namespace weft

"""`FusionReport`: what fusion made of a model, kept with the model and its export
(`explain.fusion_report` writes it)."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field


@dataclass
class FusionReport:
    # {"name", "pattern", "onnx_nodes", "int8", "precision", "layout"}; a 2-D conv in NCHW adds "plain_reason"
    kernels: list[dict] = field(default_factory=list)
    unfused: list[dict] = field(default_factory=list)  # {"onnx_node", "op_type", "reason"}
    folded: list[dict] = field(default_factory=list)  # {"onnx_node", "op_type", "reason"}: no kernel at run time
    layout_transforms: int = 0
    kernel_calls: int = 0  # every kernel a run calls, fused or not (a concat later written in place counted)
    disabled_families: list[str] = field(default_factory=list)
    tuned_kernels: int = 0  # distinct kernels of ours scheduled with a tuning record's knobs
    default_kernels: int = 0  # ... with their schedule's heuristic default
    build_seconds: dict[str, float] = field(default_factory=dict)  # per phase (`build_timings`); a cache hit's own

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> FusionReport:
        return cls(**data)

    def summary(self) -> str:
        """A few lines for people: kernels by pattern, then every unfused node and why."""
        counts = Counter(k["pattern"] for k in self.kernels)
        lines = [f"{self.kernel_calls} kernel calls per run, {len(self.kernels)} of them fused kernels:"]
        lines += [f"  {n:4d} x {pattern}" for pattern, n in counts.most_common()]
        precisions = Counter(k.get("precision", "int8" if k.get("int8") else "fp32") for k in self.kernels)
        lines += [f"{precisions[p]} of the fused kernels run in {p}" for p in ("int8", "bf16") if precisions[p]]
        lines.append(f"{len(self.unfused)} ONNX nodes left unfused:")
        lines += [f"  {u['onnx_node']} ({u['op_type']}): {u['reason']}" for u in self.unfused]
        lines.append(f"{len(self.folded)} ONNX nodes computed at build time or removed")
        plain = [k for k in self.kernels if "plain_reason" in k]
        if plain:
            lines.append(f"{len(plain)} conv kernels run in NCHW, not blocked:")
            lines += [f"  {', '.join(k['onnx_nodes'][:1])} ({k['name']}): {k['plain_reason']}" for k in plain]
        lines.append(f"{self.layout_transforms} layout transforms")
        if self.disabled_families:
            lines.append(f"disabled fusion families: {', '.join(self.disabled_families)}")
        lines.append(f"{self.tuned_kernels} kernels scheduled from tuning records, "
                     f"{self.default_kernels} with default knobs")
        return "\n".join(lines)

"""Facts about one parsed module, computed on first use and shared by every rule."""

from __future__ import annotations

from functools import cached_property

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from amplint.analysis.deprecated_amp import DeprecatedAmpUse, find_deprecated_amp_uses
from amplint.analysis.imports import ImportMap
from amplint.analysis.steps import StepScan, find_training_steps
from amplint.diagnostics import Span


class ModuleFacts:
    def __init__(self, module: cst.Module, text: str) -> None:
        self.module = module
        self.text = text  # the source the module was parsed from

    @cached_property
    def imports(self) -> ImportMap:
        return ImportMap.of(self.module)

    @cached_property
    def deprecated_amp_uses(self) -> list[DeprecatedAmpUse]:
        return find_deprecated_amp_uses(self.module, self.imports)

    @cached_property
    def training_steps(self) -> StepScan:
        return find_training_steps(self.module, self.imports)

    @cached_property
    def _positions(self):
        # unsafe_skip_copy: positions must be keyed by the very nodes rules hold.
        wrapper = MetadataWrapper(self.module, unsafe_skip_copy=True)
        return wrapper.resolve(PositionProvider)

    def span(self, node: cst.CSTNode) -> Span:
        code_range = self._positions[node]
        return Span(
            line=code_range.start.line,
            column=code_range.start.column + 1,
            end_line=code_range.end.line,
            end_column=code_range.end.column + 1,
        )

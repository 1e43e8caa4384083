"""A stand-in for tensorboard in the runnable subset, where it is not
installed: enough for `from torch.utils.tensorboard import SummaryWriter` to
import, and that SummaryWriter records nothing.

torch/utils/tensorboard/__init__.py imports this package first, then its own
`.writer` (which needs tensorboard's protobuf modules) and
tensorboard.summary.writer.record_writer.RecordWriter: so this registers a
small `torch.utils.tensorboard.writer` module, holding the no-op writers below,
before torch looks for it."""

from __future__ import annotations

import sys
import types

__version__ = "2.17.0"


class SummaryWriter:
    """torch.utils.tensorboard.SummaryWriter's interface; every add_* does nothing."""

    def __init__(
        self,
        log_dir=None,
        comment="",
        purge_step=None,
        max_queue=10,
        flush_secs=120,
        filename_suffix="",
    ):
        self.log_dir = log_dir if log_dir is not None else "runs"

    def get_logdir(self) -> str:
        return self.log_dir

    def __getattr__(self, name: str):
        if name.startswith("add_"):
            return lambda *args, **kwargs: None
        raise AttributeError(name)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *args):
        self.close()


class FileWriter(SummaryWriter):
    pass


_writer = types.ModuleType(
    "torch.utils.tensorboard.writer", "tensorboard stub's writers"
)
_writer.SummaryWriter, _writer.FileWriter = SummaryWriter, FileWriter
sys.modules.setdefault("torch.utils.tensorboard.writer", _writer)

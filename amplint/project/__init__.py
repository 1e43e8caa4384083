"""The project a file belongs to: the layer between the files and the analysis.

A training step crosses module borders (the epoch loop in ``main.py`` calls
``train_one_epoch`` in ``engine.py``; the model is wrapped in FSDP somewhere
else), so the per-file analysis asks questions about the rest of the project
here.  The index is read-only and lazy: it reads a module's text only when a
question needs it, parses it with ``ast`` (never libcst, never importing it)
only when the text can answer, and keeps both by content hash.  Every module a
file's answers came from is recorded on that file's view, so a cached result
is served only while those modules are unchanged.

    roots.py         where a file's project begins; the directories it holds
    index.py         the project's modules, read on demand; imports and calls across them
    view.py          one file's window on the index, and what its answers came from
    module_facts.py  what one module's text says: an FSDP wrap, a custom kernel
    source.py        one module's text and tree; the import spellings it may hold
    configs.py, losses.py, gradient_norms.py, apex.py   the answers rules ask for
"""

from amplint.project.configs import LaunchPrecision
from amplint.project.index import CallSite, ProjectIndex, bindings, reexported
from amplint.project.losses import LossHelper
from amplint.project.module_facts import CustomKernel, FsdpUse, custom_kernel_in, fsdp_use_in
from amplint.project.roots import ROOT_MARKERS, ProjectRoot, ProjectRoots, find_project_root
from amplint.project.view import ProjectView, forget_projects, project_view, still_current

__all__ = [
    "ROOT_MARKERS",
    "CallSite",
    "CustomKernel",
    "FsdpUse",
    "LaunchPrecision",
    "LossHelper",
    "ProjectIndex",
    "ProjectRoot",
    "ProjectRoots",
    "ProjectView",
    "bindings",
    "custom_kernel_in",
    "find_project_root",
    "forget_projects",
    "fsdp_use_in",
    "project_view",
    "reexported",
    "still_current",
]

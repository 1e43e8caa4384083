"""The grammar: idioms of public training code, and complete scripts made of them.

A `Shape` picks one idiom from each family below; `render` turns it into a
runnable training script (synthetic data, a small model, the CPU, a few
steps) and says what amplint owes it: which backward calls belong to FP32
training steps that must get a finding, and which steps are a deliberate FP32
twin of an AMP step that must be left alone.  Each idiom names where it was
seen; none is copied from there.

The families, combined freely (`Shape.problems` names the few pairs that
cannot go together):

- placement: where the step lives: a loop in `main()`, a per-epoch function,
  a trainer method, a backward in a helper method (`optimize_parameters` ->
  `backward_G`, pix2pix/CycleGAN), an inner accumulation loop whose step
  follows it, the module's top level (a notebook's cells), a GAN's two steps.
- guard: the step under `if (i + 1) % k == 0:` (accumulation) or not; with
  accumulation, the touch below inside the guard or before it, on every
  micro-step (Swin-Transformer's clip and logged norm), or at the boundary
  under an `if` of its own that tests the same (where AMP203's advice to move
  a project clipper leads); or Swin's two arms
  after one model call: `if ACCUMULATION > 1:` accumulating, else stepping
  every batch.
- touch: what edits gradients between backward and step: torch's clipping
  functions (also with the norm logged, `clip_grad_norm_(...).item()`), the
  project's own helper (`clip_gradient(optimizer, c)`, image captioning
  tutorials; also inside a conditional expression) or object
  (`clipper.step(params)`), the project's gradient norm for a log (Swin's
  `get_grad_norm`, MAE's), a loop clamping `.grad` (alone, or before a clip),
  or a weight clamp after the step (WGAN), which is no gradient edit.
- optimizer: how it is made: directly, by a builder, by a conditional
  expression, as a module global; Adam, AdamW or SGD.
- container: where a GAN keeps its two optimizers: in names of their own, in
  a dict (`optims["D"].step()`), in a namespace (`optims.D.step()`, StarGAN
  v2's Munch).
- checkpoint: none, saved after training, resumed when a file exists,
  saved and resumed by closures nested in `main()`.
- existing_amp: none, or AMP already there behind a flag that is off, its
  scaler None unless the flag is on: `GradScaler() if use_amp else None`, or
  annotated and made under `if use_amp:` (`scaler: Optional[GradScaler] =
  None`, `scaler: GradScaler | None = None`); or with the model called above
  an autocast block that computes only the loss (AMP124).
- text: comments, docstrings and strings that mention AMP words, commented-out
  AMP lines, "n-gram" and "Gram".
- after: what the step's tensors meet next: `.item()`, NumPy inside the loop,
  NumPy after training, NumPy in the caller of an epoch function that returns
  its last outputs (a tutorial's attention maps, plotted after training).
- phases: one training phase, or a second one that makes a new optimizer
  under the same name (fine-tuning at a lower rate).
- twin: none, a deliberate FP32 function beside its AMP twin, or an FP32 loop
  beside its AMP twin in one scope (PyTorch's AMP recipe times "Default
  precision", then the same loop with autocast and a GradScaler).
- notebook: a script, or the same code as notebook cells (top level only).
- importer: none, or a notebook beside the script that imports its epoch
  function and calls it positionally (a fix that changes the function's
  signature must keep that call working).
- precision: who sets the step's precision: nobody (FP32), the program itself
  (a model cast to bfloat16, layers made with `dtype=`, its own `FP16`
  switch that halves the model, apex's `amp.initialize` where apex is
  installed, at an opt level the environment sets or at O1).  amplint owes
  such a step a decline that says why, in every dtype, and never an AMP001
  rewrite (AMP203 may migrate apex's O1 whole, and that must train).
- hazard: what float16 cannot carry in the forward pass: a sigmoid head
  trained with BCE (DCGAN's discriminator), the log of a sigmoid (negative
  sampling; `log(1 - sigmoid)` in a GAN), a buffer updated in the forward pass
  and multiplied by (an EMA codebook).  Declined in float16, rewritten in
  bfloat16.
"""

from __future__ import annotations

import json
import random
import textwrap
from dataclasses import asdict, dataclass, fields

FAMILIES: dict[str, tuple[str, ...]] = {
    "placement": (
        "loop",
        "epoch_function",
        "method",
        "helper_backward",
        "inner_accumulation",
        "top_level",
        "gan",
    ),
    "guard": (
        "none",
        "accumulate",
        "accumulate_touch_each",
        "accumulate_touch_apart",
        "accumulate_arms",
    ),
    "touch": (
        "none",
        "clip_norm",
        "clip_value",
        "clip_norm_item",
        "helper_clamp",
        "helper_clamp_conditional",
        "clipper_object",
        "norm_helper",
        "inline_clamp",
        "clamp_then_clip",
        "weight_clamp",
    ),
    "optimizer": ("direct", "builder", "conditional", "global"),
    "optimizer_class": ("Adam", "AdamW", "SGD"),
    "container": ("none", "dict", "namespace"),
    "checkpoint": ("none", "save", "resume", "nested_closures"),
    "existing_amp": (
        "none",
        "optional_scaler",
        "annotated_scaler",
        "union_scaler",
        "loss_only_autocast",
    ),
    "text": ("none", "amp_comments", "gram_words", "amp_strings"),
    "after": ("none", "item", "numpy_in_loop", "numpy_after", "numpy_returned"),
    "phases": ("one", "two"),
    "twin": ("none", "fp32_beside_amp", "fp32_loop_beside_amp"),
    "notebook": ("no", "yes"),
    "importer": ("none", "notebook"),
    "precision": ("fp32", "bf16_cast", "bf16_layers", "own_switch", "apex_beside", "apex_o1"),
    "hazard": ("none", "sigmoid_bce", "log_sigmoid", "ema_buffer"),
}


@dataclass(frozen=True)
class Shape:
    placement: str = "loop"
    guard: str = "none"
    touch: str = "none"
    optimizer: str = "direct"
    optimizer_class: str = "Adam"
    container: str = "none"
    checkpoint: str = "none"
    existing_amp: str = "none"
    text: str = "none"
    after: str = "none"
    phases: str = "one"
    twin: str = "none"
    notebook: str = "no"
    importer: str = "none"
    precision: str = "fp32"
    hazard: str = "none"

    @property
    def problems(self) -> list[str]:
        """Why these idioms cannot make one program (empty: they can)."""
        found = []
        in_main = self.placement in ("loop", "epoch_function", "inner_accumulation", "gan")
        if self.guard != "none" and self.placement not in (
            "loop",
            "epoch_function",
            "top_level",
        ):
            found.append("an accumulation guard needs a loop over batches with its step in it")
        if self.notebook == "yes" and self.placement != "top_level":
            found.append("notebook cells hold top-level code")
        if self.importer != "none" and (self.placement != "epoch_function" or self.twin != "none"):
            found.append("a notebook imports the script's epoch function")
        if self.optimizer == "global" and not (in_main or self.placement == "top_level"):
            found.append("a trainer class keeps its optimizer as an attribute")
        if self.container != "none" and self.placement != "gan":
            found.append("only the GAN idiom keeps its optimizers in a container")
        if self.existing_amp != "none" and self.placement not in ("loop", "top_level"):
            found.append("the flagged AMP idiom is written in a plain loop")
        if self.existing_amp != "none" and (self.guard != "none" or self.twin != "none"):
            found.append("one AMP idiom at a time")
        if self.phases == "two" and self.placement not in ("loop", "top_level"):
            found.append("a second phase re-runs a plain loop")
        if self.twin != "none" and self.placement not in ("loop", "epoch_function"):
            found.append("twins are functions of a script")
        if self.after == "numpy_returned" and (
            self.placement != "epoch_function" or self.twin != "none"
        ):
            found.append("only an epoch function returns its outputs")
        if self.twin == "fp32_loop_beside_amp" and (
            self.placement != "loop" or self.phases != "one"
        ):
            found.append("the recipe's twin loops are main()'s only training")
        if self.placement == "gan" and self.touch in ("clipper_object",):
            found.append("the GAN idiom clips its critic in place")
        if (self.precision != "fp32" or self.hazard != "none") and (
            self.existing_amp != "none" or self.twin != "none"
        ):
            found.append("one precision idiom at a time")
        if self.bfloat16_model and (
            self.placement == "gan" or self.after in ("numpy_in_loop", "numpy_returned")
        ):
            found.append("a bfloat16 model's outputs go to NumPy or meet float32 noise")
        if self.precision.startswith("apex") and (
            self.placement not in ("loop", "epoch_function", "inner_accumulation", "top_level")
            or self.optimizer == "global"
        ):
            found.append("apex initialises the model and optimizer where main() makes them")
        if self.hazard == "ema_buffer" and (
            self.placement == "gan" or self.precision == "bf16_layers"
        ):
            found.append("the EMA model is a classifier made in float32")
        return found

    @property
    def bfloat16_model(self) -> bool:
        return self.precision in ("bf16_cast", "bf16_layers")

    @property
    def managed(self) -> bool:
        """Whether the program sets its step's precision itself."""
        return self.precision != "fp32"

    def as_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Shape:
        return cls(**json.loads(text))


# Idioms drawn more often than the others of their family (weight 1): most
# programs keep an FP32 step without a hazard, so that most draws test a
# rewrite; the precision idioms are each as common as any other idiom.
WEIGHTS: dict[str, dict[str, int]] = {"precision": {"fp32": 10}, "hazard": {"none": 5}}


def random_shape(rng: random.Random) -> Shape:
    """A shape drawn among those whose idioms go together, each family's idiom
    by its weight (WEIGHTS)."""
    while True:
        chosen = {}
        for name, options in FAMILIES.items():
            weights = [WEIGHTS.get(name, {}).get(option, 1) for option in options]
            chosen[name] = rng.choices(options, weights)[0]
        shape = Shape(**chosen)
        if not shape.problems:
            return shape


def simpler(shape: Shape) -> list[Shape]:
    """Shapes one idiom closer to the default (`Shape()`), for shrinking a
    failure to the few idioms it needs."""
    default = Shape()
    found = []
    for field in fields(Shape):
        if getattr(shape, field.name) != getattr(default, field.name):
            candidate = Shape(**{**asdict(shape), field.name: getattr(default, field.name)})
            if not candidate.problems:
                found.append(candidate)
    return found


@dataclass
class Program:
    shape: Shape
    text: str  # the script, or a notebook's cells joined (see `cells`)
    cells: list[str] | None  # a notebook's code cells, in order
    # The FP32 steps owed a finding, each as its backward statements: a finding
    # on any of them is the step's (a GAN's two losses are one step).
    fp32_backwards: list[tuple[str, ...]]
    twin_backwards: list[str]  # deliberate FP32 steps beside their AMP twin: left alone
    # A notebook beside the script (explore.ipynb) that imports from it: its
    # code cells, whose calls must still bind after a fix of the script.
    importer_cells: list[str] | None = None

    @property
    def declined_in(self) -> frozenset[str]:
        """The dtypes in which the FP32 steps must be declined with a reason,
        never rewritten: every dtype where the program manages its precision,
        float16 (and auto, which may pick it) where the forward pass holds a
        float16 hazard."""
        if self.shape.managed:
            return frozenset({"float16", "bfloat16", "auto"})
        if self.shape.hazard != "none":
            return frozenset({"float16", "auto"})
        return frozenset()

    def notebook_json(self, cells: list[str] | None = None) -> str:
        """The program's cells (or `cells`) as a notebook's JSON."""
        cells = [
            {
                "cell_type": "code",
                "execution_count": None,
                "metadata": {},
                "outputs": [],
                "source": cell.splitlines(keepends=True),
            }
            for cell in (cells if cells is not None else self.cells) or []
        ]
        document = {
            "cells": cells,
            "metadata": {"language_info": {"name": "python"}},
            "nbformat": 4,
            "nbformat_minor": 5,
        }
        return json.dumps(document, indent=1) + "\n"


def _indent(code: str, levels: int) -> str:
    return textwrap.indent(code, "    " * levels)


class _Renderer:
    """One program of one shape.  Text is built as blocks of lines at known
    indentation; `m` and `opt` are how the step spells its model and
    optimizer (`model` / `self.model`)."""

    def __init__(self, shape: Shape) -> None:
        self.shape = shape
        self.fp32_backwards: list[tuple[str, ...]] = []
        self.twin_backwards: list[str] = []
        self.helpers: list[str] = []
        self.twins: list[str] = []  # the FP32 function and its AMP twin, when the shape has them

    # -- the model, its loss and who sets its precision ------------------------
    def model_expression(self, critic: bool = False) -> str:
        shape = self.shape
        if shape.hazard == "ema_buffer":
            self._helper(EMA_NET)
            return "EmaNet()"
        width = 1 if shape.hazard == "sigmoid_bce" or critic else 2
        dtype = ", dtype=DTYPE" if shape.precision == "bf16_layers" else ""
        act = "nn.LeakyReLU(0.2)" if critic else "nn.ReLU()"
        head = ", nn.Sigmoid()" if shape.hazard == "sigmoid_bce" else ""
        return (
            f"nn.Sequential(nn.Linear(16, 32{dtype}), {act}, nn.Linear(32, {width}{dtype}){head})"
        )

    def model_setup(self, on_device: bool = True, name: str = "model") -> str:
        """The statements that make the model `name` (and set its precision)."""
        shape = self.shape
        made = f"{name} = {self.model_expression()}"
        made += ".to(device)" if on_device else ""
        made += ".to(torch.bfloat16)" if shape.precision == "bf16_cast" else ""
        made += "\n"
        if shape.precision == "own_switch":
            made += f"if FP16:\n    {name} = {name}.half()\n"
        return made

    def apex_initialise(self) -> str:
        precision = self.shape.precision
        if not precision.startswith("apex"):
            return ""
        level = '"O1"' if precision == "apex_o1" else "APEX_OPT_LEVEL"
        return (
            "if amp is not None:\n"
            f"    model, optimizer = amp.initialize(model, optimizer, opt_level={level})\n"
        )

    def criterion(self, output: str, y: str) -> str:
        """The loss of `output` against the labels `y`."""
        hazard = self.shape.hazard
        if hazard == "sigmoid_bce":
            return f"F.binary_cross_entropy({output}.squeeze(1), {y}.to({output}.dtype))"
        if hazard == "log_sigmoid":
            return f"-torch.log(torch.sigmoid({output}.gather(1, {y}[:, None]))).mean()"
        return f"F.cross_entropy({output}, {y})"

    # -- the pieces a step is made of -----------------------------------------
    def touch(self, m: str, opt: str) -> str:
        """What the step does to the gradients between backward and step."""
        touch = self.shape.touch
        if touch == "clip_norm":
            return f"torch.nn.utils.clip_grad_norm_({m}.parameters(), 0.5)\n"
        if touch == "clip_value":
            return f"torch.nn.utils.clip_grad_value_({m}.parameters(), 0.01)\n"
        if touch == "clip_norm_item":
            return f"grad_norm = torch.nn.utils.clip_grad_norm_({m}.parameters(), 0.5).item()\n"
        if touch == "helper_clamp":
            self._helper(CLIP_GRADIENT)
            return f"clip_gradient({opt}, 0.01)\n"
        if touch == "helper_clamp_conditional":  # the clipper inside an expression
            self._helper(CLIP_GRADIENT)
            return f"clipped = clip_gradient({opt}, 0.01) if {m}.training else None\n"
        if touch == "clipper_object":
            self._helper(GRADIENT_CLIPPER)
            return f"clipper.step({m}.parameters())\n"
        if touch == "norm_helper":
            self._helper(GET_GRAD_NORM)
            return f"grad_norm = get_grad_norm({m}.parameters())\n"
        if touch in ("inline_clamp", "clamp_then_clip"):
            clamp = f"for param in {m}.parameters():\n    param.grad.data.clamp_(-0.01, 0.01)\n"
            if touch == "inline_clamp":
                return clamp
            return clamp + f"torch.nn.utils.clip_grad_norm_({m}.parameters(), 0.5)\n"
        return ""

    def after_step(self, m: str) -> str:
        if self.shape.touch == "weight_clamp":
            return f"for param in {m}.parameters():\n    param.data.clamp_(-1.0, 1.0)\n"
        return ""

    def _helper(self, code: str) -> None:
        if code not in self.helpers:
            self.helpers.append(code)

    def classifier_step(self, m: str, opt: str, loss: str, guard: str | None) -> str:
        """One classifier step on `x`, `y`: forward, loss, backward, touch,
        step; under `guard` (an accumulation condition) the step and the
        clearing of gradients only."""
        shape = self.shape
        lines = ""
        if shape.text == "amp_comments":
            lines += "# TODO: wrap this in torch.autocast and use a GradScaler\n"
        lines += f"output = {m}(x)\n"
        if shape.after == "numpy_in_loop":
            lines += "seen.append(output.detach().cpu().numpy().mean())\n"
        if guard is not None and shape.guard == "accumulate_arms":
            return lines + self._accumulation_arms(m, opt, loss, guard)
        lines += f"{loss} = {self.criterion('output', 'y')}\n"
        if shape.text == "amp_comments":
            lines += f"# scaler.scale({loss}).backward()\n"
        backward = f"{loss}.backward()"
        self.fp32_backwards.append((backward,))
        lines += backward + "\n"
        update = f"{opt}.step()\n" + f"{opt}.zero_grad()\n" + self.after_step(m)
        if guard is not None and shape.guard == "accumulate_touch_each":
            lines += self.touch(m, opt)
        elif guard is not None and shape.guard == "accumulate_touch_apart":
            # At the boundary, under an `if` of its own that tests the same.
            touch = self.touch(m, opt)
            lines += f"if {guard}:\n" + _indent(touch, 1) if touch else ""
        else:
            update = self.touch(m, opt) + update
        if guard is not None:
            lines += f"if {guard}:\n" + _indent(update, 1)
        else:
            lines += update
        if shape.after == "item":
            lines += f"running_loss += {loss}.item()\n"
        if shape.text == "amp_strings":
            lines += 'log.append("loss (no autocast, no GradScaler)")\n'
        return lines

    def _accumulation_arms(self, m: str, opt: str, loss: str, guard: str) -> str:
        """Swin-Transformer's step after one model call: accumulating, the touch
        on every micro-step, in one arm; stepping every batch in the other."""
        accumulate = f"{loss} = {self.criterion('output', 'y')} / ACCUMULATION\n"
        accumulate += f"{loss}.backward()\n" + self.touch(m, opt)
        accumulate += f"if {guard}:\n" + _indent(f"{opt}.step()\n{opt}.zero_grad()\n", 1)
        each = f"{loss} = {self.criterion('output', 'y')}\n{opt}.zero_grad()\n"
        each += f"{loss}.backward()\n" + self.touch(m, opt) + f"{opt}.step()\n"
        self.fp32_backwards.append((f"{loss}.backward()",))
        lines = "if ACCUMULATION > 1:\n" + _indent(accumulate, 1)
        lines += "else:\n" + _indent(each, 1)
        lines += self.after_step(m)
        if self.shape.after == "item":
            lines += f"running_loss += {loss}.item()\n"
        return lines

    # -- where the step lives -------------------------------------------------
    def optimizer_expression(self, params: str) -> str:
        name = self.shape.optimizer_class
        options = {
            "Adam": "lr=1e-3",
            "AdamW": "lr=1e-3, weight_decay=0.01",
            "SGD": "lr=0.05, momentum=0.9",
        }
        made = f"torch.optim.{name}({params}, {options[name]})"
        if self.shape.optimizer == "conditional":
            return f"{made} if not use_lbfgs else torch.optim.LBFGS({params})"
        if self.shape.optimizer == "builder":
            self._helper(
                "def build_optimizer(parameters):\n"
                + f"    return torch.optim.{name}(parameters, {options[name]})\n"
            )
            return f"build_optimizer({params})"
        return made

    def checkpoint_save(self, m: str, opt: str) -> str:
        return (
            f'torch.save({{"model": {m}.state_dict(), "optimizer": {opt}.state_dict()}}, '
            "CHECKPOINT)\n"
        )

    def checkpoint_before(self, m: str, opt: str) -> str:
        """What runs before training: a resume, or the closures that save and resume."""
        if self.shape.checkpoint == "resume":
            return self.checkpoint_load(m, opt)
        if self.shape.checkpoint == "nested_closures":
            return (
                "\ndef save_checkpoint():\n"
                + _indent(self.checkpoint_save(m, opt), 1)
                + "\ndef resume():\n"
                + _indent(self.checkpoint_load(m, opt), 1)
                + "\nresume()\n"
            )
        return ""

    def checkpoint_after(self, m: str, opt: str) -> str:
        if self.shape.checkpoint in ("save", "resume"):
            return self.checkpoint_save(m, opt)
        if self.shape.checkpoint == "nested_closures":
            return "save_checkpoint()\n"
        return ""

    def second_phase_optimizer(self) -> str:
        """The fine-tuning phase's new optimizer, at a tenth of the rate, under the same name."""
        made = self.optimizer_expression("model.parameters()")
        return (
            "optimizer = "
            + made.replace("lr=1e-3", "lr=1e-4").replace("lr=0.05", "lr=0.005")
            + "\n"
        )

    def checkpoint_load(self, m: str, opt: str) -> str:
        return (
            "if os.path.exists(CHECKPOINT):\n"
            "    state = torch.load(CHECKPOINT)\n"
            f'    {m}.load_state_dict(state["model"])\n'
            f'    {opt}.load_state_dict(state["optimizer"])\n'
        )

    def render(self) -> Program:
        shape = self.shape
        placement = shape.placement
        if placement == "top_level":
            body, cells = self._top_level()
        else:
            body, cells = self._in_main(), None
        head = self._head()
        helpers = "\n\n".join(self.helpers)
        text = head + ("\n\n" + helpers if helpers else "") + "\n\n" + body
        if cells is not None:
            cells = [head + ("\n\n" + helpers if helpers else "")] + cells
            text = "\n\n".join(cells)
        importer = self._importer_cells() if shape.importer == "notebook" else None
        return Program(shape, text, cells, self.fp32_backwards, self.twin_backwards, importer)

    def _importer_cells(self) -> list[str]:
        """A notebook that imports the epoch function and calls it positionally,
        as main() does (never run: the oracle binds its call to the signature)."""
        arguments = "model, loader, optimizer, device"
        arguments += ", clipper" if self.shape.touch == "clipper_object" else ""
        arguments += ", seen" if self.shape.after == "numpy_in_loop" else ""
        return [
            "import torch\nfrom train import train_one_epoch\n",
            "%matplotlib inline\nmodel, loader, device = torch.nn.Linear(8, 4), [], 'cpu'\n"
            "clipper, seen = None, []\n"
            "optimizer = torch.optim.SGD(model.parameters(), lr=0.01)\n"
            f"train_one_epoch({arguments})",
        ]

    def _head(self) -> str:
        shape = self.shape
        doc = {
            "none": "A small classifier trained on synthetic data.",
            "amp_comments": "Trains in FP32 for now; mixed precision (autocast, GradScaler) is a TODO.",
            "gram_words": "Scores n-gram features; the Gram matrix of the features is plotted later.",
            "amp_strings": "A small classifier; prints whether AMP is on.",
        }[shape.text]
        imports = ["import os"] if shape.checkpoint != "none" or shape.precision == "apex_beside" else []
        if shape.after in ("numpy_in_loop", "numpy_after", "numpy_returned"):
            imports.append("import numpy as np")
        if shape.existing_amp == "annotated_scaler":
            imports.append("from typing import Optional")
        if shape.container == "namespace":
            imports.append("import types")
        imports += ["import torch", "import torch.nn as nn", "import torch.nn.functional as F"]
        head = f'"""{doc}"""\n\n' + "\n".join(imports) + "\n\n"
        if shape.precision.startswith("apex"):
            head += "try:\n    from apex import amp\nexcept ImportError:  # apex is optional\n"
            head += "    amp = None\n\n"
        head += 'CHECKPOINT = "checkpoint.pt"\n' if shape.checkpoint != "none" else ""
        head += "EPOCHS = 2\n"
        head += "DTYPE = torch.bfloat16\n" if shape.precision == "bf16_layers" else ""
        if shape.precision == "apex_beside":
            head += 'APEX_OPT_LEVEL = os.environ.get("APEX_OPT_LEVEL", "O1")\n'
        head += "FP16 = False  # half precision: the model is cast to float16\n" if shape.precision == "own_switch" else ""
        head += "ACCUMULATION = 2\n" if shape.guard == "accumulate_arms" else ""
        if shape.optimizer == "conditional":
            head += "use_lbfgs = False\n"
        if shape.existing_amp != "none":
            head += "use_amp = False\n"
        if shape.twin != "none":
            head += "use_amp = False\n"
        if shape.text == "gram_words":
            head += '# n-gram counts come from the tokenizer; "gram" below means Gram matrix\n'
        head += "\n\ndef make_data(count=64, width=16):\n"
        if shape.precision == "bf16_layers":
            head += "    features = torch.randn(count, width, dtype=DTYPE)\n"
        elif shape.precision == "bf16_cast":
            head += "    features = torch.randn(count, width).to(torch.bfloat16)\n"
        else:
            head += "    features = torch.randn(count, width)\n"
        head += "    labels = (features[:, :3].sum(dim=1) > 0).long()\n"
        head += (
            "    return [(features[i : i + 16], labels[i : i + 16]) for i in range(0, count, 16)]\n"
        )
        return head

    # -- placements in main() ---------------------------------------------------
    def _in_main(self) -> str:
        shape = self.shape
        placement = shape.placement
        if placement == "method":
            return self._trainer_class()
        if placement == "helper_backward":
            return self._pix2pix_class()
        main = ""
        main += "def main():\n"
        setup = SETUP
        if placement == "gan":
            return self._gan_main()
        model_setup = self.model_setup()
        setup += model_setup
        module_optimizer = shape.optimizer == "global"
        if not module_optimizer:
            setup += f"optimizer = {self.optimizer_expression('model.parameters()')}\n"
            setup += self.apex_initialise()
        if shape.touch == "clipper_object":
            self._helper(GRADIENT_CLIPPER)
            setup += "clipper = GradientClipper(0.5)\n"
        if shape.after == "numpy_in_loop":
            setup += "seen = []\n"
        if shape.text == "amp_strings":
            setup += 'log = ["amp: off"]\n'
        setup += self.checkpoint_before("model", "optimizer")
        training = self._training(placement)
        teardown = ""
        if shape.phases == "two":
            teardown += self.second_phase_optimizer()
            teardown += self._training(placement, second=True)
        teardown += self.checkpoint_after("model", "optimizer")
        if shape.after == "numpy_after":
            teardown += "with torch.no_grad():\n"
            teardown += "    predictions = np.concatenate([model(x.to(device)).argmax(1).cpu().numpy() for x, _ in loader])\n"
            teardown += '    print("accuracy", (predictions == np.concatenate([y.numpy() for _, y in loader])).mean())\n'
        if shape.after == "numpy_in_loop":
            teardown += 'print("mean output", float(np.mean(seen)))\n'
        main += _indent(setup + training + teardown, 1)
        prefix = ""
        if module_optimizer:
            # The optimizer is a module global the step function reads.
            prefix = (
                "torch.manual_seed(0)\n"
                + self.model_setup(on_device=False)
                + f"optimizer = {self.optimizer_expression('model.parameters()')}\n\n\n"
            )
            main = main.replace(_indent(model_setup, 1), "    model.to(device)\n", 1)
            if shape.phases == "two":
                main = main.replace("def main():\n", "def main():\n    global optimizer\n", 1)
        functions = self._functions()
        script = prefix + functions + main + '\n\nif __name__ == "__main__":\n    main()\n'
        return script

    def _training(self, placement: str, second: bool = False) -> str:
        """The loop (or the calls) that trains in main()."""
        shape = self.shape
        loss = "loss" if not second else "finetune_loss"
        if shape.twin == "fp32_loop_beside_amp":
            return self._twin_loops()
        if shape.twin != "none":
            self._twin_functions()
            return (
                "for epoch in range(EPOCHS):\n"
                "    if use_amp:\n        train_amp(model, loader, optimizer, device)\n"
                "    else:\n        train_fp32(model, loader, optimizer, device)\n"
            )
        if placement == "epoch_function":
            call = "train_one_epoch(model, loader, optimizer, device"
            call += ", clipper" if shape.touch == "clipper_object" else ""
            call += ", seen" if shape.after == "numpy_in_loop" else ""
            call += ")"
            if shape.after == "numpy_returned":
                return (
                    f"for epoch in range(EPOCHS):\n    last = {call}\n"
                    'print("last outputs", np.mean(last.detach().cpu().numpy()))\n'
                )
            return f"for epoch in range(EPOCHS):\n    {call}\n"
        if placement == "inner_accumulation":
            body = "x, y = x.to(device), y.to(device)\n"
            body += "for x, y in zip(x.chunk(2), y.chunk(2)):\n"
            inner = "output = model(x)\n"
            if shape.after == "numpy_in_loop":
                inner += "seen.append(output.detach().cpu().numpy().mean())\n"
            inner += f"{loss} = {self.criterion('output', 'y')} / 2\n"
            backward = f"{loss}.backward()"
            self.fp32_backwards.append((backward,))
            inner += backward + "\n"
            body += _indent(inner, 1)
            body += self.touch("model", "optimizer") + "optimizer.step()\noptimizer.zero_grad()\n"
            body += self.after_step("model")
            return "for epoch in range(EPOCHS):\n    for x, y in loader:\n" + _indent(body, 2)
        guard = "(i + 1) % 2 == 0" if shape.guard != "none" else None
        head = "running_loss = 0.0\n" if shape.after == "item" else ""
        if shape.existing_amp != "none":
            return head + self._flagged_amp_loop(loss)
        step = "x, y = x.to(device), y.to(device)\n" + self.classifier_step(
            "model", "optimizer", loss, guard
        )
        loop = "for i, (x, y) in enumerate(loader):\n" if guard else "for x, y in loader:\n"
        return head + "for epoch in range(EPOCHS):\n" + _indent(loop + _indent(step, 1), 1)

    def _flagged_amp_loop(self, loss: str) -> str:
        scaler = {
            "optional_scaler": 'scaler = torch.amp.GradScaler("cuda") if use_amp else None\n',
            "loss_only_autocast": 'scaler = torch.amp.GradScaler("cuda") if use_amp else None\n',
            "annotated_scaler": "scaler: Optional[torch.amp.GradScaler] = None\n",
            "union_scaler": "scaler: torch.amp.GradScaler | None = None\n",
        }[self.shape.existing_amp]
        if self.shape.existing_amp in ("annotated_scaler", "union_scaler"):
            scaler += 'if use_amp:\n    scaler = torch.amp.GradScaler("cuda")\n'
        step = "x, y = x.to(device), y.to(device)\n"
        if self.shape.existing_amp == "loss_only_autocast":  # AMP124: the model call above it
            step += "output = model(x)\n"
            step += "with torch.autocast(device.type, enabled=use_amp):\n"
            step += f"    {loss} = F.cross_entropy(output, y)\n"
        else:
            step += "with torch.autocast(device.type, enabled=use_amp):\n"
            step += f"    {loss} = F.cross_entropy(model(x), y)\n"
        step += "optimizer.zero_grad()\n"
        step += "if scaler is not None:\n"
        step += f"    scaler.scale({loss}).backward()\n"
        step += "    scaler.step(optimizer)\n    scaler.update()\n"
        step += f"else:\n    {loss}.backward()\n    optimizer.step()\n"
        return scaler + "for epoch in range(EPOCHS):\n    for x, y in loader:\n" + _indent(step, 2)

    def _functions(self) -> str:
        """The per-epoch function and the twins, where the shape has them."""
        shape = self.shape
        code = ""
        if shape.placement == "epoch_function" and shape.twin == "none":
            params = "model, loader, optimizer, device"
            params += ", clipper" if shape.touch == "clipper_object" else ""
            params += ", seen" if shape.after == "numpy_in_loop" else ""
            guard = "(i + 1) % 2 == 0" if shape.guard != "none" else None
            step = "x, y = x.to(device), y.to(device)\n" + self.classifier_step(
                "model", "optimizer", "loss", guard
            )
            loop = "for i, (x, y) in enumerate(loader):\n" if guard else "for x, y in loader:\n"
            body = "model.train()\n"
            body += "running_loss = 0.0\n" if shape.after == "item" else ""
            body += "log = []\n" if shape.text == "amp_strings" else ""
            body += loop + _indent(step, 1)
            body += "return running_loss\n" if shape.after == "item" else ""
            body += "return output\n" if shape.after == "numpy_returned" else ""
            code += f"def train_one_epoch({params}):\n" + _indent(body, 1) + "\n\n"
        code += "".join(self.twins)
        return code

    # One batch of the deliberate FP32 baseline, and of its AMP twin.
    _FP32_TWIN_BATCH = (
        "x, y = x.to(device), y.to(device)\n"
        "fp32_loss = F.cross_entropy(model(x), y)\n"
        "fp32_loss.backward()\n"
        "optimizer.step()\noptimizer.zero_grad()\n"
    )
    _AMP_TWIN_BATCH = (
        "x, y = x.to(device), y.to(device)\n"
        'with torch.autocast("cuda", dtype=torch.float16):\n'
        "    amp_loss = F.cross_entropy(model(x), y)\n"
        "scaler.scale(amp_loss).backward()\n"
        "scaler.step(optimizer)\nscaler.update()\noptimizer.zero_grad()\n"
    )
    _TWIN_SCALER = 'scaler = torch.amp.GradScaler("cuda")\n'

    def _twin_loops(self) -> str:
        """The FP32 loop, then its AMP twin, in one scope (the AMP recipe)."""
        self.twin_backwards.append("fp32_loss.backward()")
        epochs = "for epoch in range(EPOCHS):\n    for x, y in loader:\n"
        fp32 = epochs + _indent(self._FP32_TWIN_BATCH, 2) + 'print("default precision done")\n'
        return fp32 + self._TWIN_SCALER + epochs + _indent(self._AMP_TWIN_BATCH, 2)

    def _twin_functions(self) -> None:
        """A deliberate FP32 function beside its AMP twin (a tutorial's
        "default precision" run next to the mixed-precision one)."""
        if self.twins:
            return  # the second phase calls the same pair
        self.twin_backwards.append("fp32_loss.backward()")
        fp32 = "for x, y in loader:\n" + _indent(self._FP32_TWIN_BATCH, 1)
        amp = self._TWIN_SCALER + "for x, y in loader:\n" + _indent(self._AMP_TWIN_BATCH, 1)
        self.twins = [
            'def train_fp32(model, loader, optimizer, device):\n    """The default precision run, for comparison."""\n'
            + _indent(fp32, 1)
            + "\n\n",
            "def train_amp(model, loader, optimizer, device):\n" + _indent(amp, 1) + "\n\n",
        ]

    def _trainer_init(self, model: str) -> str:
        """The `__init__` body of a trainer class that holds `model`."""
        shape = self.shape
        init = f"self.{model} = {model}\n"
        init += f"self.optimizer = {self.optimizer_expression(model + '.parameters()')}\n"
        if shape.touch == "clipper_object":
            self._helper(GRADIENT_CLIPPER)
            init += "self.clipper = GradientClipper(0.5)\n"
        init += "self.seen = []\n" if shape.after == "numpy_in_loop" else ""
        return init

    def _trainer_class(self) -> str:
        shape = self.shape
        init = self._trainer_init("model")
        init += "self.log = []\n" if shape.text == "amp_strings" else ""
        step = self.classifier_step("self.model", "self.optimizer", "loss", None)
        step = step.replace("clipper.step(", "self.clipper.step(").replace(
            "seen.append", "self.seen.append"
        )
        step = step.replace("running_loss += loss.item()", "self.running_loss += loss.item()")
        step = step.replace("log.append", "self.log.append")
        step += "return loss.detach()\n"
        fit = "for epoch in range(epochs):\n    for x, y in loader:\n        self.train_step(x.to(device), y.to(device))\n"
        if shape.after == "item":
            init += "self.running_loss = 0.0\n"
        cls = "class Trainer:\n"
        cls += "    def __init__(self, model):\n" + _indent(init, 2) + "\n"
        cls += "    def train_step(self, x, y):\n" + _indent(step, 2) + "\n"
        cls += "    def fit(self, loader, epochs, device):\n" + _indent(fit, 2)
        return (
            cls
            + "\n\n"
            + self._class_main(
                "Trainer(model)",
                "trainer.fit(loader, EPOCHS, device)",
                "trainer.model",
                "trainer.optimizer",
            )
        )

    def _pix2pix_class(self) -> str:
        shape = self.shape
        init = self._trainer_init("net")
        forward = "self.output = self.net(self.x)\n"
        if shape.after == "numpy_in_loop":
            forward += "self.seen.append(self.output.detach().cpu().numpy().mean())\n"
        backward = f"self.loss_G = {self.criterion('self.output', 'self.y')}\n"
        if shape.text == "amp_comments":
            backward += "# scaler.scale(self.loss_G).backward()\n"
        backward += "self.loss_G.backward()\n"
        # Its finding may stand on the helper's call, where the step calls it.
        self.fp32_backwards.append(("self.loss_G.backward()", "self.backward_G()"))
        optimize = "self.forward()\nself.optimizer.zero_grad()\nself.backward_G()\n"
        optimize += self.touch("self.net", "self.optimizer").replace(
            "clipper.step(", "self.clipper.step("
        )
        optimize += "self.optimizer.step()\n" + self.after_step("self.net")
        if shape.after == "item":
            optimize += "self.running_loss += self.loss_G.item()\n"
            init += "self.running_loss = 0.0\n"
        cls = "class Pix2PixModel:\n"
        cls += "    def __init__(self, net):\n" + _indent(init, 2) + "\n"
        cls += "    def set_input(self, x, y):\n        self.x, self.y = x, y\n\n"
        cls += "    def forward(self):\n" + _indent(forward, 2) + "\n"
        cls += "    def backward_G(self):\n" + _indent(backward, 2) + "\n"
        cls += "    def optimize_parameters(self):\n" + _indent(optimize, 2)
        fit = (
            "for epoch in range(EPOCHS):\n    for x, y in loader:\n"
            "        trainer.set_input(x.to(device), y.to(device))\n        trainer.optimize_parameters()"
        )
        return (
            cls
            + "\n\n"
            + self._class_main("Pix2PixModel(model)", fit, "trainer.net", "trainer.optimizer")
        )

    def _class_main(self, made: str, fit: str, m: str, opt: str) -> str:
        shape = self.shape
        body = SETUP
        body += self.model_setup()
        body += f"trainer = {made}\n"
        body += self.checkpoint_before(m, opt)
        body += fit + "\n"
        body += self.checkpoint_after(m, opt)
        if shape.after == "numpy_after":
            body += "with torch.no_grad():\n"
            body += f"    predictions = np.concatenate([{m}(x.to(device)).argmax(1).cpu().numpy() for x, _ in loader])\n"
            body += '    print("predicted", predictions.mean())\n'
        return "def main():\n" + _indent(body, 1) + '\n\nif __name__ == "__main__":\n    main()\n'

    def _gan_main(self) -> str:
        shape = self.shape
        opt_class = shape.optimizer_class
        options = {"Adam": "lr=2e-4, betas=(0.5, 0.999)", "AdamW": "lr=2e-4", "SGD": "lr=0.01"}[
            opt_class
        ]
        body = SETUP
        body += (
            "generator = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 16)).to(device)\n"
        )
        body += self.model_setup(name="critic").replace(
            self.model_expression(), self.model_expression(critic=True), 1
        )
        body += f"optimizer_G = torch.optim.{opt_class}(generator.parameters(), {options})\n"
        body += f"optimizer_D = torch.optim.{opt_class}(critic.parameters(), {options})\n"
        if shape.after == "numpy_in_loop":
            body += "seen = []\n"
        if shape.checkpoint == "resume":
            body += self.checkpoint_load("critic", "optimizer_D")
        step = "real = x.to(device)\n"
        step += "z = torch.randn(real.size(0), 8, device=device)\n"
        step += "fake = generator(z)\n"
        if shape.after == "numpy_in_loop":
            step += "seen.append(fake.detach().cpu().numpy().mean())\n"
        step += "ones = torch.ones(real.size(0), 1, device=device)\n"
        step += "zeros = torch.zeros(real.size(0), 1, device=device)\n"
        if shape.text == "amp_comments":
            step += "# with torch.autocast('cuda'): (not yet)\n"
        step += self._gan_losses()[0]
        step += "optimizer_D.zero_grad()\n"
        step += "loss_D.backward()\n"
        step += self.touch("critic", "optimizer_D")
        step += "optimizer_D.step()\n" + self.after_step("critic")
        step += self._gan_losses()[1]
        step += "optimizer_G.zero_grad()\n"
        step += "loss_G.backward()\n"
        step += "optimizer_G.step()\n"
        if shape.after == "item":
            step += "print(loss_D.item(), loss_G.item())\n"
        self.fp32_backwards.append(("loss_D.backward()", "loss_G.backward()"))
        if shape.checkpoint == "nested_closures":
            body += "\ndef save_checkpoint():\n"
            body += _indent(self.checkpoint_save("critic", "optimizer_D"), 1) + "\n"
        body += "for epoch in range(EPOCHS):\n    for x, _ in loader:\n" + _indent(step, 2)
        body += self.checkpoint_after("critic", "optimizer_D")
        if shape.after == "numpy_after":
            body += "with torch.no_grad():\n    samples = generator(torch.randn(4, 8, device=device)).cpu().numpy()\n"
            body += '    print("sample mean", np.mean(samples))\n'
        if shape.after == "numpy_in_loop":
            body += 'print("mean fake", float(np.mean(seen)))\n'
        return "def main():\n" + _indent(self._contained(body), 1) + (
            '\n\nif __name__ == "__main__":\n    main()\n'
        )

    def _contained(self, body: str) -> str:
        """The GAN's body with its optimizers kept in the shape's container."""
        container = self.shape.container
        if container == "none":
            return body
        lines = body.splitlines(keepends=True)
        made = [line for line in lines if line.startswith(("optimizer_G = ", "optimizer_D = "))]
        # "optimizer_G = torch.optim.Adam(...)" -> {"G": "torch.optim.Adam(...)"}
        values = {line[len("optimizer_")] : line.split(" = ", 1)[1].strip() for line in made}
        if container == "dict":
            creation = "optims = {" + ", ".join(f'"{k}": {v}' for k, v in values.items()) + "}\n"
            spelled = {k: f'optims["{k}"]' for k in values}
        else:
            creation = (
                "optims = types.SimpleNamespace("
                + ", ".join(f"{k}={v}" for k, v in values.items())
                + ")\n"
            )
            spelled = {k: f"optims.{k}" for k in values}
        text = "".join(line for line in lines if line not in made[1:])
        text = text.replace(made[0], creation)
        for key, expression in spelled.items():
            text = text.replace(f"optimizer_{key}", expression)
        return text

    def _gan_losses(self) -> tuple[str, str]:
        """The critic's loss and the generator's, as statements."""
        hazard = self.shape.hazard
        if hazard == "log_sigmoid":  # the minimax loss written out
            return (
                "loss_D = -(torch.log(torch.sigmoid(critic(real))) + torch.log(1 - torch.sigmoid(critic(fake.detach())))).mean()\n",
                "loss_G = -torch.log(torch.sigmoid(critic(fake))).mean()\n",
            )
        bce = "F.binary_cross_entropy" if hazard == "sigmoid_bce" else "F.binary_cross_entropy_with_logits"
        return (
            f"loss_D = {bce}(critic(real), ones) + {bce}(critic(fake.detach()), zeros)\n",
            f"loss_G = {bce}(critic(fake), ones)\n",
        )

    # -- top level, or a notebook's cells ----------------------------------------
    def _top_level(self) -> tuple[str, list[str]]:
        shape = self.shape
        cells = []
        setup = SETUP
        setup += self.model_setup()
        cells.append(setup)
        made = f"optimizer = {self.optimizer_expression('model.parameters()')}\n"
        made += self.apex_initialise()
        if shape.touch == "clipper_object":
            self._helper(GRADIENT_CLIPPER)
            made += "clipper = GradientClipper(0.5)\n"
        if shape.checkpoint in ("resume", "nested_closures"):
            made += self.checkpoint_load("model", "optimizer")
        cells.append(made)
        head = "seen = []\n" if shape.after == "numpy_in_loop" else ""
        head += "log = []\n" if shape.text == "amp_strings" else ""
        cells.append(head + self._training("loop"))
        if shape.phases == "two":
            cells.append(self.second_phase_optimizer())
            cells.append(self._training("loop", second=True))
        tail = ""
        if shape.checkpoint != "none":
            tail += self.checkpoint_save("model", "optimizer")
        if shape.after == "numpy_after":
            tail += "with torch.no_grad():\n"
            tail += "    predictions = np.concatenate([model(x.to(device)).argmax(1).cpu().numpy() for x, _ in loader])\n"
            tail += 'print("predicted", predictions.mean())\n'
        if shape.after == "numpy_in_loop":
            tail += 'print("mean output", float(np.mean(seen)))\n'
        if tail:
            cells.append(tail)
        return "\n".join(cells), cells


# What every main() (or notebook) does first.
SETUP = (
    "torch.manual_seed(0)\n"
    'device = torch.device("cuda" if torch.cuda.is_available() else "cpu")\n'
    "loader = make_data()\n"
)

CLIP_GRADIENT = '''def clip_gradient(optimizer, grad_clip):
    """Clamps every gradient the optimizer holds to [-grad_clip, grad_clip]."""
    for group in optimizer.param_groups:
        for param in group["params"]:
            if param.grad is not None:
                param.grad.data.clamp_(-grad_clip, grad_clip)
'''

GET_GRAD_NORM = '''def get_grad_norm(parameters, norm_type=2):
    """The p-norm of the gradients of `parameters`, for a log."""
    parameters = list(filter(lambda p: p.grad is not None, parameters))
    norm_type = float(norm_type)
    total_norm = 0
    for p in parameters:
        total_norm += p.grad.data.norm(norm_type).item() ** norm_type
    return total_norm ** (1.0 / norm_type)
'''

GRADIENT_CLIPPER = '''class GradientClipper:
    """Clips the norm of the gradients it is given."""

    def __init__(self, max_norm):
        self.max_norm = max_norm

    def step(self, parameters):
        parameters = [p for p in parameters if p.grad is not None]
        total = torch.norm(torch.stack([p.grad.detach().norm() for p in parameters]))
        factor = min(1.0, self.max_norm / (float(total) + 1e-6))
        for p in parameters:
            p.grad.detach().mul_(factor)
'''


EMA_NET = '''class EmaNet(nn.Module):
    """A classifier over features centred by a codebook that follows their
    moving average (a VQ-VAE's EMA codebook, small)."""

    def __init__(self, decay=0.9):
        super().__init__()
        self.decay = decay
        self.body = nn.Sequential(nn.Linear(16, 32), nn.ReLU())
        self.head = nn.Linear(32, 2)
        self.register_buffer("embed", torch.eye(32))

    def forward(self, x):
        h = self.body(x)
        if self.training:
            with torch.no_grad():
                self.embed.mul_(self.decay).add_(h.t() @ h / len(h), alpha=1 - self.decay)
        return self.head(h @ self.embed)
'''


def render(shape: Shape) -> Program:
    """The program of `shape`; ValueError when its idioms do not go together."""
    if shape.problems:
        raise ValueError("; ".join(shape.problems))
    return _Renderer(shape).render()

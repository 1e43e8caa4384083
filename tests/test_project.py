"""The project model: questions that cross module borders, answered from the
other modules of the project, and cached results that follow those modules."""

from __future__ import annotations

import codecs
import hashlib
import os
from collections import Counter
from pathlib import Path

import pytest

from amplint.project import find_project_root, project_view, still_current
from tests.helpers import dedent, run_cli

STEP_FUNCTION = dedent("""
    import torch
    import torch.nn.functional as F


    def train_one_epoch(model, loader, optimizer, epoch):
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    """)
MAIN = dedent("""
    import torch

    from engine import train_one_epoch


    def main(model, loader):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(3):
            train_one_epoch(model, loader, optimizer, epoch)
    """)


def _project(tmp_path: Path, **modules: str) -> Path:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    for name, text in modules.items():
        path = tmp_path / f"{name.replace('.', '/')}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_the_root_is_the_nearest_directory_with_a_marker(tmp_path: Path) -> None:
    root = _project(tmp_path, **{"pkg.engine": STEP_FUNCTION})
    assert find_project_root(root / "pkg" / "engine.py").path == root.resolve()


def test_without_a_marker_only_the_files_beside_the_script_are_read(tmp_path: Path) -> None:
    # A script in /tmp or ~/Downloads: nothing says where its project ends, so
    # the directories below it are not read (a caller there is not seen).
    (tmp_path / "engine.py").write_text(STEP_FUNCTION)
    (tmp_path / "main.py").write_text(MAIN)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "caller.py").write_text(MAIN)
    view = project_view(tmp_path / "engine.py")
    assert [view.relative(site.path) for site in view.callers("train_one_epoch")] == ["main.py"]


def test_without_a_marker_the_project_is_the_common_parent_of_the_paths(tmp_path: Path) -> None:
    # `amplint check scripts/train.py lib/` names the tree the user works in:
    # everything under the common parent is read, as under a marker.
    (tmp_path / "lib").mkdir()
    (tmp_path / "scripts").mkdir()
    (tmp_path / "lib" / "engine.py").write_text(STEP_FUNCTION)
    (tmp_path / "scripts" / "main.py").write_text(MAIN)
    named = run_cli("check", "--no-cache", tmp_path / "lib" / "engine.py", tmp_path / "scripts")
    assert "receives `optimizer` from scripts/main.py:9" in named.stdout
    alone = run_cli("check", "--no-cache", tmp_path / "lib" / "engine.py")
    assert "scripts/main.py" not in alone.stdout


def test_the_cache_keeps_answers_of_different_projects_apart(tmp_path: Path) -> None:
    (tmp_path / "lib").mkdir()
    (tmp_path / "scripts").mkdir()
    (tmp_path / "lib" / "engine.py").write_text(STEP_FUNCTION)
    (tmp_path / "scripts" / "main.py").write_text(MAIN)
    cache = tmp_path / "cache"
    alone = run_cli("check", "--cache-dir", cache, tmp_path / "lib" / "engine.py")
    assert "scripts/main.py" not in alone.stdout
    named = run_cli(
        "check", "--cache-dir", cache, tmp_path / "lib" / "engine.py", tmp_path / "scripts"
    )
    assert "from scripts/main.py:9" in named.stdout


def test_callers_in_other_modules_are_found_through_their_imports(tmp_path: Path) -> None:
    root = _project(
        tmp_path,
        engine=STEP_FUNCTION,
        main=MAIN,
        other="import engine\n\nengine.train_one_epoch(m, l, o, 1)\n",
        unrelated="def train_one_epoch():\n    pass\n\ntrain_one_epoch()\n",
    )
    view = project_view(root / "engine.py")
    sites = sorted(
        (view.relative(site.path), site.line, site.caller)
        for site in view.callers("train_one_epoch")
    )
    assert sites == [("main.py", 9, "main"), ("other.py", 3, "<module>")]
    assert set(view.consulted) == {
        str((root / "main.py").resolve()),
        str((root / "other.py").resolve()),
    }


IMPORT_SPELLINGS = {
    "plain": "import engine\n\nengine.train_one_epoch(m, l, o, 1)\n",
    "dotted_as": "import pkg.engine as e\n\ne.train_one_epoch(m, l, o, 1)\n",
    "from_name": "from pkg.engine import train_one_epoch\n\ntrain_one_epoch(m, l, o, 1)\n",
    "after_semicolon": "x = 1; from pkg import engine\n\nengine.train_one_epoch(m, l, o, 1)\n",
    "continued": "from pkg import os, \\\n    engine\n\nengine.train_one_epoch(m, l, o, 1)\n",
    "parenthesized": "from pkg import (  # a comment) with a bracket\n    os,\n    engine,\n)\n"
    "\nengine.train_one_epoch(m, l, o, 1)\n",
    "relative": "from .engine import train_one_epoch\n\ntrain_one_epoch(m, l, o, 1)\n",
    "indented": "try:\n    from pkg.engine import train_one_epoch\nexcept ImportError:\n    pass\n"
    "train_one_epoch(m, l, o, 1)\n",
}


def test_a_caller_is_found_however_its_import_spells_the_module(tmp_path: Path) -> None:
    root = _project(
        tmp_path,
        **{"pkg.__init__": "", "pkg.engine": STEP_FUNCTION},
        **{f"pkg.{name}": text for name, text in IMPORT_SPELLINGS.items()},
    )
    view = project_view(root / "pkg" / "engine.py")
    callers = {Path(site.path).stem for site in view.callers("train_one_epoch")}
    assert callers == set(IMPORT_SPELLINGS)


def test_a_module_naming_the_module_outside_an_import_is_not_parsed(tmp_path: Path) -> None:
    # `train.py` defines `train`: every module that says "train" twice would
    # be parsed to look for an import of it.
    root = _project(
        tmp_path,
        train=STEP_FUNCTION,
        paths='ENTRY = "train.py"\n\ndef train_one_epoch():\n    return "train"\n',
        comment="import os  # the same as train.py\nimport sys\ntrain_one_epoch = None\n",
        docstring='"""from the train module"""\ntrain_one_epoch = None\n',
    )
    view = project_view(root / "train.py")
    assert view.callers("train_one_epoch") == []
    index = view.index
    parsed = {path.name for path, (_, module) in index._modules.items() if module._parsed}
    # The comment follows an import on its line and the docstring says "from
    # ... train": a text test may parse those; the string alone is not enough.
    assert "paths.py" not in parsed
    assert parsed <= {"comment.py", "docstring.py"}


def test_each_module_is_compared_with_its_file_once_per_file_analysed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _project(tmp_path, engine=STEP_FUNCTION, main=MAIN)
    main = str((root / "main.py").resolve())
    stats: Counter[str] = Counter()
    real_stat = os.stat

    def counted(path, *args, **kwargs):
        stats[os.fspath(path)] += 1
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", counted)
    view = project_view(root / "engine.py")
    assert [site.caller for site in view.callers("train_one_epoch")] == ["main"]
    view.index.fsdp_uses()
    view.custom_kernels()
    assert stats[main] == 1  # three questions read every module
    # The next file's analysis compares them again, and sees an edit.
    (root / "main.py").write_text(MAIN.replace("def main(", "def run_training("))
    view = project_view(root / "engine.py")
    assert [site.caller for site in view.callers("train_one_epoch")] == ["run_training"]
    assert stats[main] == 2


def test_a_module_digest_is_the_hash_of_its_file_bytes(tmp_path: Path) -> None:
    # Made from the text when first asked: the cache compares it with the file.
    root = _project(tmp_path)
    spellings = {
        "plain.py": b"x = 1\n",
        "bom.py": codecs.BOM_UTF8 + b"x = 1\n",
        "crlf.py": b"x = 1\r\ny = 2\r\n",
        "accents.py": "nom = 'caf\u00e9'  # \u00e9t\u00e9\n".encode("utf-8"),
    }
    for name, data in spellings.items():
        (root / name).write_bytes(data)
    view = project_view(root / "plain.py")
    for name, data in spellings.items():
        module = view.index.module((root / name).resolve())
        assert module.digest == hashlib.sha256(data).hexdigest(), name
        assert still_current({str(module.path): module.digest})


def test_a_step_whose_optimizer_comes_from_another_module_names_that_file(tmp_path: Path) -> None:
    root = _project(tmp_path, engine=STEP_FUNCTION, main=MAIN)
    result = run_cli("check", "--no-cache", root / "engine.py")
    assert "not rewritten: `train_one_epoch` receives `optimizer` from main.py:9" in result.stdout
    fixed = run_cli("fix", "--apply", "--no-cache", root / "engine.py")
    assert fixed.exit_code == 1
    assert (root / "engine.py").read_text() == STEP_FUNCTION


def test_a_notebook_calling_the_step_function_is_a_caller(tmp_path: Path) -> None:
    # A notebook beside the script imports its training function and calls it
    # positionally: threading a scaler parameter through the script's own call
    # would leave the notebook's call one argument short (TypeError on run).
    from tests.test_notebooks import code_cell, notebook_json

    script = STEP_FUNCTION + dedent("""


        if __name__ == "__main__":
            model = torch.nn.Linear(4, 2)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(3):
                train_one_epoch(model, [], optimizer, epoch)
        """)
    root = _project(tmp_path, engine=script)
    cells = [
        code_cell("import torch\nfrom engine import train_one_epoch\n"),
        code_cell("%matplotlib inline\nopt = torch.optim.SGD([], lr=0.1)\ntrain_one_epoch(m, [], opt, 0)"),
    ]
    (root / "explore.ipynb").write_text(notebook_json(cells))
    view = project_view(root / "engine.py")
    [site] = view.callers("train_one_epoch")
    assert (site.where(view.relative(site.path)), site.cell) == ("explore.ipynb:cell 2:3", 2)
    assert str(site.path) in view.consulted  # the cache follows the notebook
    result = run_cli("check", "--no-cache", root / "engine.py")
    assert "receives `optimizer` from explore.ipynb:cell 2:3" in result.stdout
    fixed = run_cli("fix", "--apply", "--no-cache", root / "engine.py")
    assert (root / "engine.py").read_text() == script, fixed.stdout
    # Without the notebook the scaler is threaded through the script's call.
    (root / "explore.ipynb").unlink()
    fixed = run_cli("fix", "--apply", "--no-cache", root / "engine.py")
    assert "train_one_epoch(model, [], optimizer, scaler, epoch)" in (root / "engine.py").read_text()


def test_fsdp_in_a_module_of_the_same_program_counts(tmp_path: Path) -> None:
    wrapper = dedent("""
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, MixedPrecision

        import engine

        model = FSDP(model, mixed_precision=MixedPrecision(param_dtype=torch.bfloat16))
        """)
    script = STEP_FUNCTION + "\n\ntrain_one_epoch(model, loader, torch.optim.SGD([], 0.1), 0)\n"
    root = _project(tmp_path, engine=script, launch=wrapper, unrelated_example=MAIN)
    result = run_cli("check", "--no-cache", root / "engine.py")
    assert "FSDP with a mixed-precision policy (launch.py:5)" in result.stdout


def test_fsdp_is_read_from_each_spelling_of_its_wrapper_and_policy() -> None:
    from amplint.project import fsdp_use_in

    assert fsdp_use_in("x = 1\nm = FSDP(m)\n").line == 2
    assert not fsdp_use_in("m = FSDP(m)\n").mixed_precision
    assert fsdp_use_in("m = FSDP(m, mixed_precision=p)\n").mixed_precision
    assert fsdp_use_in("m = FSDP(m, mp_policy = p)\n").mixed_precision
    assert fsdp_use_in("p = MixedPrecisionPolicy (param_dtype=t)\nFSDP(m)\n").mixed_precision
    assert fsdp_use_in("m = FullyShardedDataParallel (m)\n") is not None
    # The first wrapper in the text says which kind it is.
    assert fsdp_use_in("fully_shard(layer)\nFSDP(m)\n").composable
    assert not fsdp_use_in("FSDP(m)\nfully_shard(layer)\n").composable
    # Named, not called; or another name ending in the same letters.
    assert fsdp_use_in("from x import FSDP\nuse_FSDP = True\n") is None
    assert fsdp_use_in("m = MyFSDP(m)\nm = not_fully_shard(m)\n") is None
    assert not fsdp_use_in("m = FSDP(m)\nmy_mixed_precision = 1\n").mixed_precision


def test_fsdp_in_an_unrelated_example_of_the_same_repository_does_not(tmp_path: Path) -> None:
    root = _project(
        tmp_path,
        **{
            "mnist.main": STEP_FUNCTION.replace("def train_one_epoch", "def _unused")
            + "\n\ndef run(model, loader):\n"
            "    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
            "    for x, y in loader:\n"
            "        loss = F.cross_entropy(model(x), y)\n"
            "        loss.backward()\n"
            "        optimizer.step()\n",
            "fsdp.t5": "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
            "model = FSDP(model)\n",
        },
    )
    result = run_cli("check", "--no-cache", root / "mnist" / "main.py")
    assert "FSDP" not in result.stdout


def test_a_cached_result_is_recomputed_when_a_module_it_read_changes(tmp_path: Path) -> None:
    root = _project(tmp_path, engine=STEP_FUNCTION, main=MAIN)
    cache = tmp_path / "cache"
    first = run_cli("check", "--cache-dir", cache, root / "engine.py")
    assert "from main.py:9" in first.stdout
    (root / "main.py").write_text(
        MAIN.replace("train_one_epoch(model", "pass  # train_one_epoch(model")
    )
    second = run_cli("check", "--cache-dir", cache, root / "engine.py")
    assert "from main.py" not in second.stdout


LOSSES = dedent("""
    import torch.nn as nn
    import torch.nn.functional as F


    def _bce(p, t):
        return F.binary_cross_entropy(p, t)


    def vae_loss(recon, x, mu, logvar):
        return _bce(recon, x) + (mu * logvar).sum()


    class GANLoss(nn.Module):
        def __init__(self):
            super().__init__()
            self.loss = nn.BCELoss()

        def forward(self, p, real):
            return self.loss(p, torch.ones_like(p) if real else torch.zeros_like(p))


    def l1(p, t):
        return (p - t).abs().mean()
    """)
VAE_STEP = dedent("""
    import torch

    from .losses import l1, vae_loss


    def train(model, loader):
        optimizer = torch.optim.Adam(model.parameters())
        for x in loader:
            x = x.cuda(non_blocking=True)
            recon, mu, logvar = model(x)
            loss = vae_loss(recon, x, mu, logvar) + l1(recon, x)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    """)


def test_a_loss_helper_of_another_module_is_seen_through_a_relative_import(
    tmp_path: Path,
) -> None:
    root = _project(tmp_path, **{"pkg.__init__": "", "pkg.losses": LOSSES, "pkg.engine": VAE_STEP})
    result = run_cli("check", "--no-cache", root / "pkg" / "engine.py")
    assert "`vae_loss` (it calls binary_cross_entropy, pkg/losses.py:9)" in result.stdout
    # bfloat16: float16 declines a BCE loss for its range (analysis/precision.py).
    diff = run_cli("fix", "--no-cache", "--dtype", "bfloat16", root / "pkg" / "engine.py").stdout
    assert "+        loss = vae_loss(recon.float(), x, mu.float(), logvar.float()) + l1(" in diff


def test_a_loss_module_of_another_module_is_seen_through_its_instances(tmp_path: Path) -> None:
    step = dedent("""
        import torch

        import losses


        def train(net_d, loader):
            criterion = losses.GANLoss().cuda()
            optimizer = torch.optim.Adam(net_d.parameters())
            for real in loader:
                loss = criterion(net_d(real), True)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        """)
    root = _project(tmp_path, losses=LOSSES, train=step)
    result = run_cli("check", "--no-cache", root / "train.py")
    assert "`criterion` (it calls BCELoss, losses.py:13)" in result.stdout
    unrelated = step.replace("losses.GANLoss()", "torch.nn.MSELoss()")
    (root / "train.py").write_text(unrelated)
    assert "it calls" not in run_cli("check", "--no-cache", root / "train.py").stdout


# rosinality's StyleGAN2 shape: the generator's activation is a compiled CUDA
# kernel that reads its float32 bias and its input as one type.
FUSED_ACT = dedent("""
    import os

    import torch
    from torch.autograd import Function
    from torch.utils.cpp_extension import load

    module_path = os.path.dirname(__file__)
    fused = load(
        "fused",
        sources=[os.path.join(module_path, "fused_bias_act.cpp")],
    )


    class FusedLeakyReLUFunction(Function):
        @staticmethod
        def forward(ctx, input, bias):
            return fused.fused_bias_act(input, bias, input.new_empty(0), 3, 0, 0.2, 2**0.5)
    """)
GENERATOR = dedent("""
    from torch import nn

    from op import FusedLeakyReLUFunction


    class Generator(nn.Module):
        def forward(self, x):
            return FusedLeakyReLUFunction.apply(self.conv(x), self.bias)
    """)
PROJECTOR = dedent("""
    import torch

    from model import Generator

    generator = Generator().cuda()
    latent = torch.zeros(1, 512, device="cuda", requires_grad=True)
    optimizer = torch.optim.Adam([latent], lr=0.1)
    for i in range(100):
        loss = (generator(latent) - target).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    """)


def _stylegan(directory: Path, fused_act: str = FUSED_ACT) -> Path:
    (directory / "op").mkdir()
    (directory / "op" / "__init__.py").write_text("from .fused_act import FusedLeakyReLUFunction\n")
    (directory / "op" / "fused_act.py").write_text(fused_act)
    (directory / "model.py").write_text(GENERATOR)
    (directory / "projector.py").write_text(PROJECTOR)
    return directory / "projector.py"


def test_custom_cuda_kernels_imported_by_the_model_stop_the_rewrite(tmp_path: Path) -> None:
    # No marker: a lone script, whose imports are still followed into op/.
    script = _stylegan(tmp_path)
    result = run_cli("check", "--no-cache", script)
    assert "C++/CUDA kernels compiled in op/fused_act.py:8 without `custom_fwd`" in result.stdout
    assert "+" not in run_cli("fix", "--no-cache", script).stdout  # no diff


def test_kernels_made_autocast_aware_or_outside_the_program_do_not(tmp_path: Path) -> None:
    aware = FUSED_ACT.replace(
        "    @staticmethod\n    def forward",
        '    @staticmethod\n    @torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.float32)\n'
        "    def forward",
    )
    (tmp_path / "aware").mkdir()
    assert (
        "+    with torch.autocast("
        in run_cli("fix", "--no-cache", _stylegan(tmp_path / "aware", aware)).stdout
    )
    # A kernel in a module the script's program never imports.
    (tmp_path / "apart").mkdir()
    script = _stylegan(tmp_path / "apart")
    script.write_text(
        PROJECTOR.replace("from model import Generator", "from torchvision import models")
    )
    assert "compiled in" not in run_cli("check", "--no-cache", script).stdout


def test_loss_helpers_are_found_without_parsing_the_whole_module() -> None:
    from amplint.project.source import definitions_mentioning

    text = dedent("""
        import torch.nn.functional as F


        @torch.no_grad()
        def unrelated(x):
            return x


        def bce(a, b):
            return F.binary_cross_entropy(a, b)


        def vae_loss(
            recon, x
        ) -> float:
            return bce(recon, x) + 1


        class Plain:
            pass
        """)
    found = definitions_mentioning(text, frozenset({"binary_cross_entropy"}))
    assert {name: node.lineno for name, node in found.items()} == {"bce": 9, "vae_loss": 13}
    # A docstring's lines at column 0 are inside the def, not a new statement.
    noted = text.replace(
        "    return bce(recon, x) + 1", '    """\nNote.\n"""\n    return bce(recon, x)'
    )
    found = definitions_mentioning(noted, frozenset({"binary_cross_entropy"}))
    assert sorted(found) == ["bce", "vae_loss"]
    # Quotes the count cannot pair: the caller parses the whole module.
    unpaired = noted.replace('"""\n    return', "'''\n    return")
    assert definitions_mentioning(unpaired, frozenset({"binary_cross_entropy"})) is None


def test_kernels_reached_through_a_module_importing_the_step_count(tmp_path: Path) -> None:
    # engine.py holds the step and never imports the model; main.py imports both.
    _stylegan(tmp_path)
    (tmp_path / "engine.py").write_text(STEP_FUNCTION)
    (tmp_path / "main.py").write_text(
        MAIN.replace("from engine import", "from model import Generator\nfrom engine import")
    )
    result = run_cli("check", "--no-cache", tmp_path / "engine.py")
    assert "C++/CUDA kernels compiled in op/fused_act.py:8" in result.stdout


PPO_MODULE = dedent("""
    import torch.nn as nn
    import torch.optim as optim


    class PPO:
        def __init__(self, actor_critic, lr, max_grad_norm):
            self.actor_critic = actor_critic
            self.max_grad_norm = max_grad_norm
            self.optimizer = optim.Adam(actor_critic.parameters(), lr=lr)

        def update(self, batches):
            for obs, actions, returns in batches:
                values, log_probs = self.actor_critic.evaluate(obs, actions)
                loss = (returns - values).pow(2).mean() - log_probs.mean()
                self.optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(self.actor_critic.parameters(), self.max_grad_norm)
                self.optimizer.step()
    """)
PPO_MAIN = dedent("""
    import torch
    from algo.ppo import PPO
    from model import Policy

    device = torch.device("cuda:0")
    agent = PPO(Policy().to(device), 3e-4, 0.5)
    """)


def test_a_library_module_trains_where_the_script_importing_it_puts_the_model(
    tmp_path: Path,
) -> None:
    # pytorch-a2c-ppo-acktr-gail: algo/ppo.py names no device, main.py moves
    # the model to CUDA; "never moves off the CPU" was said of ppo.py alone.
    root = _project(tmp_path, **{"algo.ppo": PPO_MODULE})
    alone = run_cli("check", "--no-cache", root / "algo" / "ppo.py").stdout
    assert "never moves its model or data off the CPU" in alone
    (root / "main.py").write_text(PPO_MAIN)
    used = run_cli("check", "--no-cache", root / "algo" / "ppo.py").stdout
    assert "AMP001 [*] training step runs in FP32" in used
    run_cli("fix", "--no-cache", "--apply", root / "algo" / "ppo.py")
    assert "self.scaler.unscale_(self.optimizer)" in (root / "algo" / "ppo.py").read_text()

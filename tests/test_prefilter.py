"""The prefilter (`Rule.may_fire`) never drops a file that has a finding.

Every sample we own is parsed and checked by each rule directly, bypassing the
prefilter; wherever a rule reports something, its `may_fire` must be True on
that text. The samples are the fixtures, the rule documents' examples, every
code snippet in the test suite and a few spellings written to slip past a naive
substring test.
"""

from __future__ import annotations

import ast
import signal
import textwrap
from pathlib import Path

import libcst as cst
import pytest

from amplint.analysis import ModuleFacts
from amplint.catalog import load_catalog
from amplint.rules import RULES
from amplint.prefilter import SourceClues
from tests.helpers import EVERY_RULE_SETTINGS, FIXTURES, REPO, dedent

# Calls and imports spelled the way Python allows but a plain `.backward(` or
# `cuda.amp` search would miss.
TRICKY_SPELLINGS = {
    "spaced calls": """
        for x, y in loader:
            loss = criterion(model(x), y)
            loss .backward ()
            optimizer . step( )
        """,
    "continued and commented calls": """
        for x, y in loader:
            loss = criterion(model(x), y)
            (loss
                # the gradient
                .backward())
            optimizer\\
                .step()
        """,
    "manual update with add_": """
        for x, y in loader:
            loss = criterion(model(x), y)
            loss.backward()
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(p.grad, alpha=-lr)
                    p.grad = None
        """,
    "torch.cuda under an alias": """
        import torch.cuda as tc

        def step(model, x):
            with tc.amp.autocast():
                return model(x)
        """,
    "torch.cuda imported from torch": """
        from torch import cuda as gpu

        scaler = gpu.amp.GradScaler()
        """,
    # Names the compiled code objects never see: annotations and dead code.
    "deprecated class only in a local annotation": """
        import torch

        def train(model, make_scaler):
            scaler: torch.cuda.amp.GradScaler = make_scaler()
            return scaler
        """,
    "deprecated class only in postponed annotations": """
        from __future__ import annotations

        import torch

        class Trainer:
            scaler: torch.cuda.amp.GradScaler

            def restore(self, scaler: torch.cuda.amp.GradScaler) -> None:
                self.scaler = scaler
        """,
    "a training loop switched off with if False": """
        if False:
            for x, y in loader:
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
        """,
    # The syntax tree's tier (amplint/code_shape.py): a backward and a step
    # in different functions of one class.
    "the backward in a helper method": """
        import torch

        class Trainer:
            def __init__(self, model):
                self.model = model
                self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

            def backward_step(self, loss):
                loss.backward()

            def train(self, loader):
                for x, y in loader:
                    loss = torch.nn.functional.mse_loss(self.model(x), y)
                    self.backward_step(loss)
                    self.optimizer.step()
                    self.optimizer.zero_grad()
        """,
    "autocast under an alias, given a device": """
        import torch
        from torch import autocast as mixed

        gpu = torch.device("cuda")
        with mixed(gpu):
            pass
        """,
    "device_type given after other keywords": """
        import torch

        dev = torch.device("cuda")
        with torch.autocast(
            dtype=torch.bfloat16, device_type=dev
        ):
            pass
        """,
    "torch.cpu under an alias, continued": """
        import torch.cpu \\
            as host

        with host.amp.autocast():
            pass
        """,
}


def _snippets_in_tests() -> dict[str, str]:
    """Every multi-line string literal in the other tests that parses as Python."""
    snippets = {}
    for path in sorted((REPO / "tests").glob("test_*.py")):
        if path.name == Path(__file__).name:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = dedent(node.value)
                if "\n" in text.strip() and _parses(text):
                    snippets[f"{path.name}:{node.lineno}"] = text
    return snippets


def _parses(text: str) -> bool:
    try:
        cst.parse_module(text)
    except cst.ParserSyntaxError:
        return False
    return True


def _samples() -> dict[str, str]:
    samples = {
        str(path.relative_to(REPO)): path.read_text(encoding="utf-8")
        for path in sorted(FIXTURES.rglob("*.py"))
    }
    for code, doc in load_catalog().items():
        for label, example in (("before", doc.before), ("after", doc.after)):
            if example is not None:
                samples[f"rules/{code}.md:{label}"] = example
    samples.update(_snippets_in_tests())
    samples.update(
        (f"tricky:{name}", textwrap.dedent(text).lstrip("\n"))
        for name, text in TRICKY_SPELLINGS.items()
    )
    return samples


SAMPLES = _samples()


def _findings(text: str) -> dict[str, int]:
    """How many diagnostics each rule reports on `text`, prefilter bypassed."""
    module = cst.parse_module(text)
    counts = {}
    for settings in EVERY_RULE_SETTINGS:
        facts = ModuleFacts(module, text)
        for rule in RULES:
            found = sum(1 for _ in rule.check(facts, settings))
            if found:
                counts[rule.code] = counts.get(rule.code, 0) + found
    return counts


FINDINGS = {name: _findings(text) for name, text in SAMPLES.items() if _parses(text)}


@pytest.mark.parametrize("name", sorted(FINDINGS))
def test_may_fire_wherever_a_rule_finds_something(name: str) -> None:
    text = SAMPLES[name]
    for rule in RULES:
        if rule.code in FINDINGS[name]:
            assert rule.may_fire(SourceClues(text)), f"{rule.code}'s prefilter drops {name}"


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.code)
def test_every_rule_fires_on_some_sample(rule) -> None:
    """Keeps the test above from passing vacuously."""
    assert any(rule.code in found for found in FINDINGS.values())


@pytest.mark.parametrize("name", sorted(n for n in SAMPLES if n.startswith("tricky:")))
def test_tricky_spellings_are_findings(name: str) -> None:
    """Each tricky spelling is a real finding, so the prefilter test covers it."""
    assert FINDINGS[name], f"{name} has no finding; the sample tests nothing"


@pytest.mark.parametrize(
    "text",
    [
        "import torch\n\ndef f(x):\n    return torch.relu(x)\n",
        # Named only in a docstring and a comment: what most of torch's own
        # candidate files look like.
        '''def fit(model):
    """Call loss.backward() and then optimizer.step(); see torch.cuda.amp."""
    # with torch.cuda.amp.autocast(): ...
    return model
''',
    ],
)
def test_the_prefilter_skips_files_that_cannot_have_findings(text: str) -> None:
    assert not any(rule.may_fire(SourceClues(text)) for rule in RULES)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("loss.backward()", True),
        ("loss . backward ( )", True),
        ("loss\\\n    .backward()", True),
        ("(loss  # why\n .backward())", True),
        ("(loss  # one\r\n  # two\r\n .backward())", True),
        ("backward = 1", False),
        ("loss.backward_hook()", False),
        ("def backward(self):", False),
    ],
)
def test_may_call(text: str, expected: bool) -> None:
    assert SourceClues(text).may_call("backward") is expected


def test_may_call_is_linear_in_comment_characters() -> None:
    """Separator comments (`# ####...`) once made the search exponential: 2**n
    ways to split a line of n `#` into comments.  Torch has such lines; with
    n = 200 the old pattern would not finish in the life of the universe."""
    text = "x = a." + "#" * 200 + "\n" + "# " * 200 + "\nbackward + 1\n"
    if hasattr(signal, "SIGALRM"):
        signal.signal(signal.SIGALRM, _took_too_long)
        signal.alarm(10)
    try:
        assert SourceClues(text).may_call("backward") is False
    finally:
        if hasattr(signal, "SIGALRM"):
            signal.alarm(0)


def _took_too_long(signum, frame) -> None:
    raise AssertionError("SourceClues.may_call backtracks exponentially")

"""AMP901: a `# noqa: AMPxxx` that silences nothing, off unless selected."""

from __future__ import annotations

from pathlib import Path

from amplint.config import Settings
from amplint.engine import fix_text, lint_text
from tests.helpers import ALL, dedent, run_cli

STALE = dedent("""
    import torch

    scaler = torch.amp.GradScaler("cuda")  # noqa: AMP201
    old = torch.cuda.amp.GradScaler()  # noqa: AMP201, AMP202
    width = 1  # noqa: E501
    height = 2  # noqa
    shape = (width, height)  # type: ignore  # noqa: AMP105
    """)


def _found(text: str, codes: frozenset[str] = ALL) -> list[tuple[int, str]]:
    return [
        (d.span.line, d.message) for d in lint_text(text, codes, Settings()) if d.code == "AMP901"
    ]


def test_a_noqa_naming_amplint_codes_that_silence_nothing_is_reported() -> None:
    assert _found(STALE) == [
        (3, "unused `noqa` code `AMP201`: nothing here is reported under it"),
        (4, "unused `noqa` code `AMP202`: nothing here is reported under it"),
        (7, "unused `noqa` code `AMP105`: nothing here is reported under it"),
    ]


def test_the_fix_keeps_what_silences_something_and_what_is_not_amplints() -> None:
    fixed = fix_text(STALE, ALL, Settings()).text
    assert fixed == dedent("""
        import torch

        scaler = torch.amp.GradScaler("cuda")
        old = torch.cuda.amp.GradScaler()  # noqa: AMP201
        width = 1  # noqa: E501
        height = 2  # noqa
        shape = (width, height)  # type: ignore
        """)
    assert _found(fixed) == [] and fix_text(fixed, ALL, Settings()).text == fixed


def test_a_line_of_nothing_but_a_stale_directive_goes() -> None:
    text = dedent("""
        import torch


        def step():
            # noqa: AMP201
            # the schedule is tuned for 8 GPUs
            return torch.ones(1)

        # noqa: AMP201, AMP202
        """)
    fixed = fix_text(text, ALL, Settings()).text
    assert fixed == dedent("""
        import torch


        def step():
            # the schedule is tuned for 8 GPUs
            return torch.ones(1)

        """)
    assert _found(fixed) == [] and fix_text(fixed, ALL, Settings()).text == fixed


def test_codes_the_run_does_not_enable_are_not_judged() -> None:
    assert _found(STALE, ALL - {"AMP202", "AMP105"}) == [
        (3, "unused `noqa` code `AMP201`: nothing here is reported under it")
    ]


def test_a_step_silenced_where_its_loop_begins_keeps_its_noqa() -> None:
    step = dedent("""
        def train(model, loader, optimizer):
            for x, y in loader:  # noqa: AMP001
                loss = model(x).sub(y).pow(2).mean()
                loss.backward()
                optimizer.step()
        """)
    assert [d.code for d in lint_text(step, ALL, Settings())] == []


def test_a_file_no_rule_fires_on_is_still_read_for_its_noqa(tmp_path: Path) -> None:
    # Its text rules out every other rule: the stale comment is all there is.
    (tmp_path / "utils.py").write_text("def count(items):\n    return len(items)  # noqa: AMP001\n")
    plain = run_cli("check", "--no-cache", tmp_path)
    assert plain.exit_code == 0
    asked = run_cli("check", "--no-cache", "--extend-select", "AMP901", tmp_path)
    assert asked.exit_code == 1 and "utils.py:2:24: AMP901 [*]" in asked.stdout
    run_cli("fix", "--apply", "--no-cache", "--extend-select", "AMP901", tmp_path)
    assert (tmp_path / "utils.py").read_text() == "def count(items):\n    return len(items)\n"


def test_only_its_own_code_selects_it(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(STALE)
    for selection in ([], ["--select", "AMP"], ["--select", "AMP9"], ["--extend-select", "AMP90"]):
        result = run_cli("check", "--no-cache", *selection, tmp_path)
        assert "AMP901" not in result.stdout, selection
    (tmp_path / "amplint.toml").write_text('extend-select = ["AMP901"]\n')
    assert run_cli("check", "--no-cache", tmp_path).stdout.count("AMP901") == 3
    silenced = STALE.replace("# noqa: AMP201\n", "# noqa: AMP201, AMP901\n")
    (tmp_path / "train.py").write_text(silenced)
    assert run_cli("check", "--no-cache", tmp_path).stdout.count("AMP901") == 2

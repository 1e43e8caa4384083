"""One file in, diagnostics (and fixed text) out.

The engine decides from the text whether any selected rule can fire, parses a
file at most once per fix round, runs the rules over shared facts, honours
``# noqa`` and carries out fixes until nothing fixable is left.
"""

from __future__ import annotations

import ast
import warnings
from collections import Counter
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Iterable, Sequence

import libcst as cst

from amplint.analysis import ModuleFacts
from amplint.config import Settings
from amplint.diagnostics import SYNTAX_ERROR, Diagnostic, FileReport, Fix, Span, is_applicable
from amplint.files import SourceFile
from amplint.noqa import noqa_filter
from amplint.prefilter import SourceClues
from amplint.project import ProjectRoot, ProjectView, project_view
from amplint.rules import RULE_CODES, load_rules
from amplint.rules.base import Rule
from amplint.selfcheck import UnboundMemo, name_problems, new_findings, new_name_problems
from amplint.transforms.edits import apply_edits
from amplint.transforms.reparse import reparsed
from amplint.triggers import TRIGGERS, UNUSED_NOQA

if TYPE_CHECKING:
    from amplint.notebook import Notebook

# Each round applies every fix that does not overlap another; a fix that rewrites
# a whole scope makes the fixes inside it wait a round.
MAX_FIX_ROUNDS = 16


# libcst holds about 500 bytes per character of source: a 7 MB generated module
# took 80 s and 3.8 GB.  Training scripts are a few hundred kilobytes at most.
MAX_PARSE_CHARS = 2_000_000


class FixError(Exception):
    """A fix that would produce broken or unstable code; nothing is written."""


class NotAnalysed(Exception):
    """A file amplint declines to parse; the message says why, for the user."""


def _may_fire(codes: Iterable[str], clues: SourceClues) -> list[Rule]:
    """The rules of `codes` that may find something in the file `clues`
    describe: a rule whose trigger says no finds nothing there, so it is
    neither run nor loaded."""
    return load_rules(code for code in codes if TRIGGERS[code](clues))


def nothing_to_parse(text: str, settings: Settings, codes: frozenset[str]) -> bool:
    """Asked before anything reads the text whole (the prefilter's compile of
    a 5 MB module alone cost seconds and 600 MB before it was refused): True
    for a text past the size or line limit in which, by its words alone, no
    rule can find anything (a generated module); NotAnalysed for one where a
    rule might; False for a text within the limits."""
    lines = text.count("\n") + 1
    if len(text) <= MAX_PARSE_CHARS and lines <= settings.file_line_limit:
        return False
    loose = SourceClues(text, compiled=False)
    if not _may_fire(codes, loose) and not _checks_noqa(codes, loose):
        return True
    if len(text) > MAX_PARSE_CHARS:
        raise NotAnalysed(
            f"{len(text) / 1e6:.1f} MB is more than amplint parses "
            f"({MAX_PARSE_CHARS / 1e6:.0f} MB); exclude it if it is generated"
        )
    if lines > settings.file_line_limit:  # libcst took 10 s for a million blank lines
        raise NotAnalysed(
            f"{lines:,} lines, above file-line-limit {settings.file_line_limit:,}; "
            "exclude it if it is generated"
        )


def _parse(
    text: str, clues: SourceClues, rules: Sequence[Rule], codes: frozenset[str], settings: Settings
) -> cst.Module | list[Diagnostic]:
    """The module, or what to report instead: nothing when no rule of `rules`
    (those that may fire) is left, AMP900 when the file does not parse or is
    too deep to try."""
    if not rules and not _checks_noqa(codes, clues):
        return []
    reason = clues.too_deep_to_parse
    try:
        if reason is not None:
            diagnostics = [Diagnostic(SYNTAX_ERROR, f"cannot parse: {reason}", Span(1, 1, 1, 1))]
        else:
            return cst.parse_module(text)
    except cst.ParserSyntaxError as error:
        diagnostics = [_syntax_error(text, error)]
    return noqa_filter(text, diagnostics) if SYNTAX_ERROR in codes else []


def _syntax_error(text: str, error: cst.ParserSyntaxError) -> Diagnostic:
    """AMP900 with CPython's own message and position where it has one."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the user reads findings, not our parse's warnings
            ast.parse(text)
    except SyntaxError as python_error:
        line = python_error.lineno or 1
        column = python_error.offset or 1
        message = f"syntax error: {python_error.msg}"
    else:  # valid Python that libcst cannot read (newer syntax)
        line, column = error.editor_line, error.editor_column
        message = f"cannot parse: {error.message}"
    return Diagnostic(SYNTAX_ERROR, message, Span(line, column, line, column))


def _checks_noqa(codes: frozenset[str], clues: SourceClues) -> bool:
    """Whether AMP901 is asked for and the file has a `noqa` it could judge:
    it needs the parse even where no rule may fire (each such code is then
    unused)."""
    return UNUSED_NOQA in codes and TRIGGERS[UNUSED_NOQA](clues)


def _lint_module(
    facts: ModuleFacts,
    text: str,
    rules: Sequence[Rule],
    settings: Settings,
    codes: frozenset[str],
    clues: SourceClues,
) -> list[Diagnostic]:
    diagnostics = [d for rule in rules for d in _checked(rule, facts, settings)]
    return _as_reported(text, _with_unused_noqa(facts, diagnostics, codes, clues, settings))


def _with_unused_noqa(
    facts: ModuleFacts,
    diagnostics: list[Diagnostic],
    codes: frozenset[str],
    clues: SourceClues,
    settings: Settings,
) -> list[Diagnostic]:
    """The rules' findings, and AMP901's on them where it is asked for (it
    judges the `# noqa` comments by what they silence, so before they do)."""
    if not _checks_noqa(codes, clues):
        return diagnostics
    from amplint.unused_noqa import unused_noqa  # opt-in: loaded when asked for

    found = unused_noqa(facts, diagnostics, codes)
    if not settings.fix_allowed(UNUSED_NOQA):
        found = [replace(d, fix=None) for d in found]
    return diagnostics + found


# The fixes that change what training computes (mixed precision where there
# was none, a scaler where there was none): not written in test files, whose
# assertions may hold FP32 numerics, unless `rewrite-tests` says so.
NUMERICS_FIXES = frozenset({"AMP001", "AMP002", "AMP003", "AMP004", "AMP005", "AMP006", "AMP106"})
TEST_FILE_NOT_FIXED = (
    "(not fixed: a test file, whose assertions may hold FP32 numerics; "
    "`rewrite-tests = true` rewrites test files too)"
)


def _checked(rule: Rule, facts: ModuleFacts, settings: Settings) -> list[Diagnostic]:
    """What `rule` finds, its fix left off where `fixable`/`unfixable` say so:
    such a finding is reported as having none, and no round applies it."""
    diagnostics = list(rule.check(facts, settings))
    if settings.test_file and not settings.rewrite_tests and rule.code in NUMERICS_FIXES:
        return [
            replace(d, fix=None, message=f"{d.message} {TEST_FILE_NOT_FIXED}")
            if d.fix is not None
            else d
            for d in diagnostics
        ]
    if settings.fix_allowed(rule.code):
        return diagnostics
    return [replace(d, fix=None) if d.fix is not None else d for d in diagnostics]


def _as_reported(text: str, diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    """The rules' findings in source order, less those a `# noqa` silences."""
    diagnostics.sort(key=lambda d: (d.span.line, d.span.column, d.code))
    return noqa_filter(text, diagnostics)


def _disjoint_fixes(due: list[Diagnostic], facts: ModuleFacts) -> list[Diagnostic]:
    """The due fixes whose edited regions do not overlap, smallest first.

    A fix may rewrite a whole function or class; fixes inside it wait for the
    next round, where they are recomputed on the rewritten code.  A fix several
    findings share (AMP203 migrates a module at once) is applied once, for all.
    """

    def extents(diagnostic: Diagnostic) -> list[tuple[tuple[int, int], tuple[int, int]]]:
        spans = [facts.span(edit.target) for edit in diagnostic.fix.edits]
        return [((s.line, s.column), (s.end_line, s.end_column)) for s in spans]

    def size(diagnostic: Diagnostic) -> tuple[int, int]:
        regions = extents(diagnostic)
        start = min(region[0] for region in regions)
        end = max(region[1] for region in regions)
        return (end[0] - start[0], end[1] - start[1])

    chosen: set[Fix] = set()
    taken: list[tuple[tuple[int, int], tuple[int, int]]] = []
    one_per_fix = {diagnostic.fix: diagnostic for diagnostic in reversed(due)}
    for diagnostic in sorted(one_per_fix.values(), key=size):
        mine = extents(diagnostic)
        if any(
            start < other_end and other_start < end
            for start, end in mine
            for other_start, other_end in taken
        ):
            continue
        chosen.add(diagnostic.fix)
        taken += mine
    return [diagnostic for diagnostic in due if diagnostic.fix in chosen]


def lint_text(
    text: str, codes: frozenset[str], settings: Settings, project: ProjectView | None = None
) -> list[Diagnostic]:
    return _lint(text, codes, settings, project)[0]


def _lint(
    text: str, codes: frozenset[str], settings: Settings, project: ProjectView | None = None
) -> tuple[list[Diagnostic], ModuleFacts | None]:
    if nothing_to_parse(text, settings, codes):
        return [], None
    clues = SourceClues(text)
    rules = _may_fire(codes, clues)
    module = _parse(text, clues, rules, codes, settings)
    if isinstance(module, list):
        return module, None
    facts = ModuleFacts(module, text, project)
    return _lint_module(facts, text, rules, settings, codes, clues), facts


def lint_with_previews(
    text: str, codes: frozenset[str], settings: Settings, project: ProjectView | None = None
) -> tuple[list[Diagnostic], dict[Diagnostic, str]]:
    """The findings, and for each fixable one the code its fix alone gives,
    from one parse."""
    diagnostics, facts = _lint(text, codes, settings, project)
    previews: dict[Diagnostic, str] = {}
    if facts is None or not any(d.fix is not None for d in diagnostics):
        return diagnostics, previews
    if not facts.round_trips:
        return diagnostics, previews  # not reproducible: `fix` refuses it too
    fixed_code: dict[Fix, str] = {}  # a fix several findings share is previewed once
    for diagnostic in diagnostics:
        fix = diagnostic.fix
        if fix is None or not (fix.edits or fix.module_passes):
            continue
        if fix not in fixed_code:
            module = apply_edits(facts.module, fix.edits)
            for module_pass in fix.module_passes:
                module = module_pass(module)
            fixed_code[fix] = module.code
        previews[diagnostic.portable()] = fixed_code[fix]
    return diagnostics, previews


@dataclass
class FixResult:
    """The text after the fixes of one file, with what was fixed and what remains."""

    text: str
    applied: list[Diagnostic]
    remaining: list[Diagnostic]
    found: list[Diagnostic]  # before any fix: what `check` reports


def fix_text(
    text: str,
    codes: frozenset[str],
    settings: Settings,
    unsafe: bool = False,
    project: ProjectView | None = None,
) -> FixResult:
    """Apply fixes, re-parse and re-check until no applicable fix is left, then
    hold the result to the self-check (amplint.selfcheck).

    A fix whose rewrite fails the self-check is left out, and its finding says
    why; the others are kept.  Raises FixError when a round yields code that
    does not parse, changes nothing although fixes were due, or the rounds do
    not converge.
    """
    if nothing_to_parse(text, settings, codes):
        return FixResult(text, [], [], [])
    clues = SourceClues(text)
    module = _parse(text, clues, _may_fire(codes, clues), codes, settings)
    if isinstance(module, list):
        return FixResult(text, [], module, module)
    analyses = _Analyses(text, ModuleFacts(module, text, project), settings, clues)
    found = analyses.findings(text, codes)
    due = [diagnostic for diagnostic in found if is_applicable(diagnostic, unsafe)]
    if not due:
        return FixResult(text, [], found, found)
    # Generating the whole module costs about a third of the parse: only a
    # file about to change pays for proving the round trip.
    if not analyses.facts(text).round_trips:
        raise FixError("libcst cannot reproduce this file byte for byte; not fixing it")
    rounds = _FixRounds(analyses, found, codes, unsafe)
    result = rounds.run(blocked=frozenset())
    judge = _SelfCheck(analyses)
    problems = judge.problems(result.text)
    if not problems:
        return result
    # Some fix is to blame: keep the first-round fixes one at a time, each
    # only if the rewrite with it still passes.
    groups: dict[Fix, list[_Key]] = {}
    for key, diagnostic in _keyed(due):
        groups.setdefault(diagnostic.fix, []).append(key)
    every = frozenset(key for keys in groups.values() for key in keys)
    accepted: set[_Key] = set()
    rejected: dict[_Key, list[str]] = {}
    best = FixResult(text, [], found, found)
    for keys in groups.values():
        trial = rounds.run(blocked=every - accepted - set(keys))
        problems = judge.problems(trial.text)
        if problems:
            rejected.update((key, problems) for key in keys)
        else:
            accepted.update(keys)
            best = trial
    best.remaining = [
        _refused(diagnostic, rejected[key]) if key in rejected else diagnostic
        for key, diagnostic in _keyed(best.remaining)
    ]
    return best


# A finding as the fix rounds know it from round to round, where its position
# moves: its code, its message and which of the findings alike it is.
_Key = tuple[str, str, int]


def _keyed(diagnostics: Sequence[Diagnostic]) -> list[tuple[_Key, Diagnostic]]:
    seen: Counter[tuple[str, str]] = Counter()
    keyed = []
    for diagnostic in diagnostics:
        alike = (diagnostic.code, diagnostic.message)
        keyed.append(((*alike, seen[alike]), diagnostic))
        seen[alike] += 1
    return keyed


def _refused(diagnostic: Diagnostic, problems: list[str]) -> Diagnostic:
    why = "; ".join(problems[:2]) + (
        f" (and {len(problems) - 2} more)" if len(problems) > 2 else ""
    )
    return replace(diagnostic, message=f"{diagnostic.message}; not fixed: {why}", fix=None)


class _Analyses:
    """The facts of the texts one fix looks at, and their findings per rule,
    each made once: the fix rounds and the self-check read the same texts (the
    original, the last rewrite) with overlapping sets of rules, and on a large
    module a parse and a run of the rules cost a second each.

    Only the original and the latest other text are kept: a libcst tree holds
    hundreds of bytes per character of source."""

    def __init__(
        self, original: str, facts: ModuleFacts, settings: Settings, clues: SourceClues
    ) -> None:
        self.original = original
        self.settings = settings
        self._kept: dict[str, tuple[ModuleFacts, dict[Rule, list[Diagnostic]], SourceClues]] = {
            original: (facts, {}, clues)
        }
        self._edited: tuple[str, cst.Module, cst.Module] | None = None

    @property
    def project(self) -> ProjectView | None:
        return self.facts(self.original).project

    def facts(self, text: str) -> ModuleFacts:
        """Raises cst.ParserSyntaxError when `text` does not parse."""
        if text not in self._kept:
            facts = self._from_edits(text) or ModuleFacts(
                cst.parse_module(text), text, self.project
            )
            facts.original_text = self.original
            for other in [kept for kept in self._kept if kept != self.original]:
                del self._kept[other]
            # A rewrite's rules are chosen by its text alone: compiling it
            # costs a quarter of a parse, and the looser test only runs more.
            self._kept[text] = (facts, {}, SourceClues(text, compiled=False))
        return self._kept[text][0]

    def expect(self, text: str, before: cst.Module, edited: cst.Module) -> None:
        """`text` is the code of `edited`, which edits made of `before`: its
        facts may come from the statements that changed (transforms/reparse.py)."""
        self._edited = (text, before, edited)

    def _from_edits(self, text: str) -> ModuleFacts | None:
        if self._edited is None or self._edited[0] != text:
            return None
        _, before, edited = self._edited
        self._edited = None
        module = reparsed(before, edited, text)
        if module is None:
            return None
        facts = ModuleFacts(module, text, self.project)
        return facts if facts.round_trips else None

    def findings(self, text: str, codes: Iterable[str]) -> list[Diagnostic]:
        """What the rules of `codes` report on `text`, as `_lint_module` gives it."""
        codes = frozenset(codes)
        facts = self.facts(text)
        _, by_rule, clues = self._kept[text]
        rules = _may_fire(codes, clues)
        for rule in rules:
            if rule not in by_rule:
                by_rule[rule] = _checked(rule, facts, self.settings)
        found = [d for rule in rules for d in by_rule[rule]]
        return _as_reported(text, _with_unused_noqa(facts, found, codes, clues, self.settings))


class _FixRounds:
    """The fix loop over one file, which may be told to leave findings alone."""

    def __init__(
        self, analyses: _Analyses, found: list[Diagnostic], codes: frozenset[str], unsafe: bool
    ) -> None:
        self.analyses, self.found, self.codes, self.unsafe = analyses, found, codes, unsafe

    def run(self, blocked: frozenset[_Key]) -> FixResult:
        text, diagnostics = self.analyses.original, self.found
        applied: list[Diagnostic] = []
        for round_number in range(MAX_FIX_ROUNDS):
            if round_number > 0:
                try:
                    diagnostics = self.analyses.findings(text, self.codes)
                except cst.ParserSyntaxError as error:
                    message = f"a fix produced code that does not parse: {error.message}"
                    raise FixError(message) from None
            facts = self.analyses.facts(text)
            module = facts.module
            due = [
                diagnostic
                for key, diagnostic in _keyed(diagnostics)
                if key not in blocked and is_applicable(diagnostic, self.unsafe)
            ]
            if not due:
                return FixResult(text, applied, diagnostics, self.found)
            due = _disjoint_fixes(due, facts)
            fixes = list(dict.fromkeys(d.fix for d in due))
            new_module = apply_edits(module, (edit for fix in fixes for edit in fix.edits))
            for module_pass in dict.fromkeys(p for fix in fixes for p in fix.module_passes):
                new_module = module_pass(new_module)
            new_text = new_module.code
            self.analyses.expect(new_text, module, new_module)
            if new_text == text:
                raise FixError(
                    "fixes for " + ", ".join(sorted({d.code for d in due})) + " changed nothing"
                )
            applied += due
            text = new_text
        raise FixError(f"fixes did not settle after {MAX_FIX_ROUNDS} rounds")


def self_check(original: str, rewritten: str, settings: Settings) -> list[str]:
    """What keeps `rewritten` from being written as a rewrite of `original`:
    findings and name problems it adds (empty when it passes)."""
    facts = ModuleFacts(cst.parse_module(original), original)
    return _SelfCheck(_Analyses(original, facts, settings, SourceClues(original))).problems(
        rewritten
    )


class _SelfCheck:
    """Every rule, and the name checks, on a rewrite of the original."""

    def __init__(self, analyses: _Analyses) -> None:
        self.analyses = analyses
        self.original = analyses.original
        self.before = analyses.findings(self.original, RULE_CODES)
        self._unbound: UnboundMemo = {}  # shared by the original and its rewrites
        self.names_before = name_problems(self.original, self._unbound)

    def problems(self, rewritten: str) -> list[str]:
        if rewritten == self.original:
            return []
        try:
            after = self.analyses.findings(rewritten, RULE_CODES)
        except cst.ParserSyntaxError as error:
            return [f"the rewrite would not parse: {error.message}"]
        problems = [
            f"the rewrite would leave {d.code} at line {d.span.line} ({d.message})"
            for d in new_findings(self.before, after)
        ]
        problems += [
            f"the rewrite would {p}"
            for p in new_name_problems(self.names_before, rewritten, self._unbound)
        ]
        return problems


def analyse_source(
    source: SourceFile,
    codes: frozenset[str],
    settings: Settings,
    fixing: bool = False,
    unsafe: bool = False,
    previews: bool = False,
    project_root: ProjectRoot | None = None,
) -> FileReport:
    """Lint one file's code, or compute its fixed text when `fixing` (writing
    it is the caller's choice).  Diagnostics come back portable: no libcst
    nodes, so the report can cross process boundaries.  A notebook's come back
    placed in its cells, and its fixed text is the notebook's JSON."""
    report = FileReport(source.path)
    project = project_view(source.path, project_root)
    if settings.is_test_file(source.path):
        settings = replace(settings, test_file=True)
    # Bytes the fix does not touch would change too: check such a file only.
    writable = source.round_trips
    try:
        _analyse(
            report, source.code, codes, settings, fixing and writable, unsafe, previews, project
        )
        if fixing and not writable:
            report.error = (
                f"not fixed, file left unchanged: its {source.encoding} bytes do not come back "
                "the same when its text is encoded again"
            )
        report.depends_on = project.consulted
        if source.notebook is not None:
            _place_in_cells(report, source.notebook)
        return report
    except NotAnalysed as reason:
        report.error = f"not analysed: {reason}"
    except RecursionError:
        # Code Python compiles but nests deeper than a recursive walk of its
        # syntax tree can follow, such as a sum of a thousand terms.
        report.error = "not analysed: nested too deeply (Python's recursion limit)"
    report.diagnostics, report.applied, report.fixed_text = [], [], None
    return report


def _analyse(
    report: FileReport,
    text: str,
    codes: frozenset[str],
    settings: Settings,
    fixing: bool,
    unsafe: bool,
    previews: bool,
    project: ProjectView,
) -> FileReport:
    if not fixing:
        if previews:
            diagnostics, report.previews = lint_with_previews(text, codes, settings, project)
        else:
            diagnostics = lint_text(text, codes, settings, project)
        report.found = report.diagnostics = _portable(diagnostics)
        return report
    try:
        result = fix_text(text, codes, settings, unsafe, project)
    except FixError as error:
        report.error = f"not fixed, file left unchanged: {error}"
        report.found = report.diagnostics = _portable(lint_text(text, codes, settings, project))
        return report
    report.found = _portable(result.found)
    report.applied = _portable(result.applied)
    report.diagnostics = _portable(result.remaining)
    if result.text != text:
        report.fixed_text = result.text
    return report


def _portable(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    return [diagnostic.portable() for diagnostic in diagnostics]


def _place_in_cells(report: FileReport, notebook: Notebook) -> None:
    """Positions as cell and line within it; the fixed module back into the JSON."""

    def placed(diagnostic: Diagnostic) -> Diagnostic:
        span = diagnostic.span
        cell, line = notebook.position(span.line)
        end_cell, end_line = notebook.position(span.end_line)
        if end_cell != cell:  # a span never crosses cells; be safe
            end_line = line
        return replace(diagnostic, span=Span(line, span.column, end_line, span.end_column, cell))

    report.diagnostics = [placed(d) for d in report.diagnostics]
    report.applied = [placed(d) for d in report.applied]
    if report.found is not None:
        report.found = [placed(d) for d in report.found]
    report.previews = {placed(d): code for d, code in report.previews.items()}
    if report.fixed_text is None:
        return
    from amplint.notebook import NotebookError  # loaded for notebooks only (files.py)

    try:
        report.fixed_text = notebook.with_code(report.fixed_text)
    except NotebookError as error:
        report.error = f"not fixed, file left unchanged: {error}"
        report.fixed_text = None
        report.diagnostics = list(report.found or [])
        report.applied = []

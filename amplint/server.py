"""`amplint server`: a Language Server over standard input and output.

It publishes the findings of each Python document the editor opens, changes
or saves (what `check` reports on the file with the buffer's text, under the
configuration `check` would read for it), and of each notebook's Python cells
(the notebook analysed as `check` analyses an `.ipynb` file); offers each
finding's fix in a Python document as a quick fix (safe ones preferred,
unsafe ones labelled) and every safe fix at once as the
`source.fixAll.amplint` action.  The analyses are those of
amplint.api, in a worker process each; while the user types, a change waits
a moment for the next, and the findings of a text that has changed since are
dropped, never published.  Built on pygls (`pip install 'amplint[server]'`).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Sequence
from urllib.parse import unquote

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path
from pygls.workspace import TextDocument

from amplint import __version__, api
from amplint.files import NOTEBOOK_SUFFIX

SOURCE = "amplint"
FIX_ALL = f"{types.CodeActionKind.SourceFixAll.value}.{SOURCE}"
# How long a change waits for the next before it is analysed: typing on
# costs no analysis of every keystroke.
SETTLE_S = 0.3


class AmplintServer(LanguageServer):
    def __init__(self) -> None:
        # Notebooks come as notebook documents whose Python cells are text
        # documents of their own (LSP 3.17's notebook synchronization).
        python_cells = types.NotebookDocumentFilterWithCells(
            notebook="*", cells=[types.NotebookCellLanguage(language="python")]
        )
        super().__init__(
            SOURCE,
            __version__,
            notebook_document_sync=types.NotebookDocumentSyncOptions(
                notebook_selector=[python_cells], save=True
            ),
        )
        self._waiting: dict[str, asyncio.Task] = {}  # uri -> its analysis, not yet published
        # uri -> (the text analysed, its findings): what code actions offer
        self.findings: dict[str, tuple[str, list[api.Finding]]] = {}

    def analyse_later(self, uri: str, delay: float) -> None:
        """Analyse the document after `delay` seconds, in place of an analysis
        still waiting for it."""
        waiting = self._waiting.pop(uri, None)
        if waiting is not None:
            waiting.cancel()
        self._waiting[uri] = asyncio.get_running_loop().create_task(self._analyse(uri, delay))

    def opened(self, uri: str) -> TextDocument | None:
        """The document the client opened at `uri`, or None.  Never one read
        from disk: a client may name any URI (`didSave` of `file:///dev/zero`,
        a FIFO), and pygls would read it whole, or wait on it for ever."""
        return self.workspace.text_documents.get(unquote(uri))

    def forget(self, uri: str, cells: Sequence[str] = ()) -> None:
        """Stop analysing the document (or the notebook with `cells`) and
        clear what was published for it."""
        waiting = self._waiting.pop(uri, None)
        if waiting is not None:
            waiting.cancel()
        for published in cells or [uri]:
            self.findings.pop(published, None)
            self.text_document_publish_diagnostics(
                types.PublishDiagnosticsParams(uri=published, diagnostics=[])
            )

    async def _analyse(self, uri: str, delay: float) -> None:
        await asyncio.sleep(delay)
        notebook = self.workspace.get_notebook_document(notebook_uri=uri)
        if notebook is not None:
            await self._analyse_notebook(notebook)
            return
        document = self.opened(uri)
        path = _path(uri)
        if document is None or path is None:
            if self._waiting.get(uri) is asyncio.current_task():
                del self._waiting[uri]
            return
        version, text = document.version, document.source
        try:
            found = await asyncio.to_thread(_check, text, path)
        except (api.ConfigError, api.AnalysisError) as error:
            self.window_log_message(
                types.LogMessageParams(type=types.MessageType.Warning, message=f"{path}: {error}")
            )
            found = []
        if self._waiting.get(uri) is not asyncio.current_task():
            return  # the document changed, or closed, meanwhile: a newer analysis comes
        del self._waiting[uri]
        self.findings[uri] = (text, found)
        diagnostics = [_diagnostic(document, finding) for finding in found]
        self.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=uri, diagnostics=diagnostics, version=version)
        )

    async def _analyse_notebook(self, notebook: types.NotebookDocument) -> None:
        """The notebook's cells analysed as `check` analyses an `.ipynb` file
        (as one module, IPython lines masked), each cell's findings published
        on that cell."""
        path = to_fs_path(notebook.uri)
        if path is None or not path.endswith(NOTEBOOK_SUFFIX):
            return
        opened = [self.opened(cell.document) for cell in notebook.cells]
        cells = [cell for cell in opened if cell is not None]
        if len(cells) != len(opened):
            return  # a cell the client never sent: nothing is read from disk for it
        kinds = [cell.kind for cell in notebook.cells]
        try:
            found = await asyncio.to_thread(_check, _as_ipynb(kinds, cells), Path(path))
        except (api.ConfigError, api.AnalysisError) as error:
            self.window_log_message(
                types.LogMessageParams(type=types.MessageType.Warning, message=f"{path}: {error}")
            )
            found = []
        if self._waiting.get(notebook.uri) is not asyncio.current_task():
            return
        del self._waiting[notebook.uri]
        for number, cell in enumerate(cells, 1):
            in_cell = [f for f in found if f.cell == number]
            self.findings[cell.uri] = (cell.source, in_cell)  # each cell's quick fixes
            diagnostics = [_diagnostic(cell, f) for f in in_cell]
            self.text_document_publish_diagnostics(
                types.PublishDiagnosticsParams(
                    uri=cell.uri, diagnostics=diagnostics, version=cell.version
                )
            )


server = AmplintServer()


def _check(text: str, path: Path) -> list[api.Finding]:
    return api.check_source(text, path, api.load_settings([path]))


def _as_ipynb(kinds: list[types.NotebookCellKind], cells: list[TextDocument]) -> str:
    """The notebook's cells as the `.ipynb` JSON amplint reads (nbformat 4),
    its markup cells kept so that cell numbers are the editor's."""
    return json.dumps(
        {
            "cells": [
                (
                    {
                        "cell_type": "code",
                        "source": cell.source,
                        "metadata": {},
                        "outputs": [],
                        "execution_count": None,
                    }
                    if kind == types.NotebookCellKind.Code
                    else {"cell_type": "markdown", "source": cell.source, "metadata": {}}
                )
                for kind, cell in zip(kinds, cells)
            ],
            "metadata": {},
            "nbformat": 4,
            "nbformat_minor": 5,
        }
    )


def _path(uri: str) -> Path | None:
    """The file a Python document's URI names; None for anything else."""
    path = to_fs_path(uri)
    return Path(path) if path is not None and path.endswith(".py") else None


@server.feature(types.TEXT_DOCUMENT_DID_OPEN)
def did_open(ls: AmplintServer, params: types.DidOpenTextDocumentParams) -> None:
    ls.analyse_later(params.text_document.uri, 0)


@server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
def did_change(ls: AmplintServer, params: types.DidChangeTextDocumentParams) -> None:
    ls.analyse_later(params.text_document.uri, SETTLE_S)


@server.feature(types.TEXT_DOCUMENT_DID_SAVE)
def did_save(ls: AmplintServer, params: types.DidSaveTextDocumentParams) -> None:
    # The project around the file changed on disk: its answers may too.
    ls.analyse_later(params.text_document.uri, 0)


@server.feature(types.NOTEBOOK_DOCUMENT_DID_OPEN)
def notebook_did_open(ls: AmplintServer, params: types.DidOpenNotebookDocumentParams) -> None:
    ls.analyse_later(params.notebook_document.uri, 0)


@server.feature(types.NOTEBOOK_DOCUMENT_DID_CHANGE)
def notebook_did_change(ls: AmplintServer, params: types.DidChangeNotebookDocumentParams) -> None:
    ls.analyse_later(params.notebook_document.uri, SETTLE_S)


@server.feature(types.NOTEBOOK_DOCUMENT_DID_SAVE)
def notebook_did_save(ls: AmplintServer, params: types.DidSaveNotebookDocumentParams) -> None:
    ls.analyse_later(params.notebook_document.uri, 0)


@server.feature(types.NOTEBOOK_DOCUMENT_DID_CLOSE)
def notebook_did_close(ls: AmplintServer, params: types.DidCloseNotebookDocumentParams) -> None:
    ls.forget(params.notebook_document.uri, [cell.uri for cell in params.cell_text_documents])


@server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
def did_close(ls: AmplintServer, params: types.DidCloseTextDocumentParams) -> None:
    ls.forget(params.text_document.uri)


@server.feature(
    types.TEXT_DOCUMENT_CODE_ACTION,
    types.CodeActionOptions(
        code_action_kinds=[types.CodeActionKind.QuickFix, FIX_ALL],
        resolve_provider=False,
    ),
)
async def code_action(
    ls: AmplintServer, params: types.CodeActionParams
) -> list[types.CodeAction] | None:
    uri = params.text_document.uri
    document = ls.opened(uri)
    analysed = ls.findings.get(uri)
    if document is None or analysed is None or analysed[0] != document.source:
        return None  # not analysed as it stands: its findings are on their way
    wanted = params.context.only
    actions = []
    if wanted is None or any(kind.startswith(types.CodeActionKind.QuickFix) for kind in wanted):
        actions += [
            _quick_fix(document, finding)
            for finding in analysed[1]
            if finding.fix is not None
            and finding.fix.edits
            and _overlaps(document, finding.range, params.range)
        ]
    # Only where asked (a source-action menu, a fix-all on save): it runs
    # every fix and their self-check, too much for each move of the cursor.
    if wanted is not None and any(FIX_ALL.startswith(kind) for kind in wanted):
        fixed = await asyncio.to_thread(_fix, document.source, _path(uri))
        if fixed is not None and fixed.text != document.source:
            edits = api.edits_between(document.source, fixed.text)
            actions.append(
                types.CodeAction(
                    title="amplint: fix all safe fixes",
                    kind=FIX_ALL,
                    edit=_workspace_edit(document, edits),
                )
            )
    return actions


def _fix(text: str, path: Path | None) -> api.FixedSource | None:
    if path is None:
        return None
    try:
        return api.fix_source(text, path, api.load_settings([path]), unsafe=False)
    except (api.ConfigError, api.AnalysisError):
        return None


def _quick_fix(document: TextDocument, finding: api.Finding) -> types.CodeAction:
    fix = finding.fix
    assert fix is not None
    label = fix.message if fix.safe else f"{fix.message} (unsafe: may change numerics)"
    return types.CodeAction(
        title=f"amplint {finding.code}: {label}",
        kind=types.CodeActionKind.QuickFix,
        diagnostics=[_diagnostic(document, finding)],
        is_preferred=fix.safe,
        edit=_workspace_edit(document, fix.edits),
    )


def _workspace_edit(document: TextDocument, edits: tuple[api.TextEdit, ...]) -> types.WorkspaceEdit:
    return types.WorkspaceEdit(
        changes={
            document.uri: [
                types.TextEdit(range=_client_range(document, edit.range), new_text=edit.new_text)
                for edit in edits
            ]
        }
    )


def _diagnostic(document: TextDocument, finding: api.Finding) -> types.Diagnostic:
    return types.Diagnostic(
        range=_client_range(document, finding.range),
        message=finding.message,
        severity=types.DiagnosticSeverity.Error,  # as every report format says it
        code=finding.code,
        source=SOURCE,
    )


def _client_range(document: TextDocument, found: api.Range) -> types.Range:
    """`found` (1-based, in characters) in the client's units (0-based, UTF-16
    unless it chose another encoding)."""
    return document.position_codec.range_to_client_units(
        document.lines,
        types.Range(
            start=types.Position(found.start.line - 1, found.start.column - 1),
            end=types.Position(found.end.line - 1, found.end.column - 1),
        ),
    )


def _overlaps(document: TextDocument, found: api.Range, asked: types.Range) -> bool:
    mine = _client_range(document, found)
    before = (mine.end.line, mine.end.character) < (asked.start.line, asked.start.character)
    after = (mine.start.line, mine.start.character) > (asked.end.line, asked.end.character)
    return not (before or after)


def serve() -> None:
    """Serve one client over standard input and output until it exits."""
    server.start_io()

"""`amplint server`, driven over standard input and output by pygls's own
language client, as an editor drives it: initialize, open a document, read
its diagnostics, ask for code actions, apply one, change the document, and
shut down."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pygls")

from lsprotocol import types  # noqa: E402
from pygls.lsp.client import LanguageClient  # noqa: E402

from amplint import api  # noqa: E402
from tests.helpers import REPO, dedent  # noqa: E402

# A deprecated scaler after a string holding a character outside the Basic
# Multilingual Plane: the client counts it as two UTF-16 units, Python as one.
SCRIPT = dedent("""
    import torch

    label = "🚀"; scaler = torch.cuda.amp.GradScaler()
    """)
FP32_STEP = dedent("""
    import torch


    def train(model, loader, optimizer):
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    """)


class _Session:
    """A client connected to `amplint server`, collecting what it publishes."""

    def __init__(self) -> None:
        self.client = LanguageClient("amplint-tests", "0")
        self.published: asyncio.Queue[types.PublishDiagnosticsParams] = asyncio.Queue()
        self.client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)(
            lambda params: self.published.put_nowait(params)
        )

    async def start(self, root: Path) -> types.InitializeResult:
        await self.client.start_io(sys.executable, "-m", "amplint", "server")
        result = await self.client.initialize_async(
            types.InitializeParams(
                capabilities=types.ClientCapabilities(),
                root_uri=root.as_uri(),
                workspace_folders=[types.WorkspaceFolder(uri=root.as_uri(), name="project")],
            )
        )
        self.client.initialized(types.InitializedParams())
        return result

    async def diagnostics(self, uri: str) -> types.PublishDiagnosticsParams:
        while True:
            params = await asyncio.wait_for(self.published.get(), timeout=60)
            if params.uri == uri:
                return params

    def open(self, path: Path, text: str) -> str:
        uri = path.as_uri()
        self.client.text_document_did_open(
            types.DidOpenTextDocumentParams(
                text_document=types.TextDocumentItem(
                    uri=uri, language_id="python", version=1, text=text
                )
            )
        )
        return uri

    def change(self, uri: str, version: int, text: str) -> None:
        self.client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
                content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
            )
        )

    async def actions(
        self, uri: str, diagnostics: list[types.Diagnostic], only: list[str] | None = None
    ) -> list[types.CodeAction]:
        whole = types.Range(start=types.Position(0, 0), end=types.Position(10_000, 0))
        return await self.client.text_document_code_action_async(
            types.CodeActionParams(
                text_document=types.TextDocumentIdentifier(uri=uri),
                range=diagnostics[0].range if diagnostics else whole,
                context=types.CodeActionContext(diagnostics=diagnostics, only=only),
            )
        )

    async def stop(self) -> None:
        await self.client.shutdown_async(None)
        self.client.exit(None)
        await self.client.stop()


def _project(tmp_path: Path) -> Path:
    (tmp_path / "pyproject.toml").write_text("[tool.amplint]\n")
    return tmp_path


def _applied(text: str, edits: list[types.TextEdit]) -> str:
    """`edits` (in UTF-16 units, as the client received them) applied to `text`."""
    lines = text.splitlines(keepends=True)

    def offset(position: types.Position) -> int:
        before = "".join(lines[: position.line])
        line = lines[position.line] if position.line < len(lines) else ""
        units, characters = 0, 0
        while units < position.character:
            units += len(line[characters].encode("utf-16-le")) // 2
            characters += 1
        return len(before) + characters

    for edit in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character))[::-1]:
        text = text[: offset(edit.range.start)] + edit.new_text + text[offset(edit.range.end) :]
    return text


def test_the_server_publishes_findings_offers_fixes_and_follows_changes(tmp_path: Path) -> None:
    root = _project(tmp_path)
    path = root / "train.py"
    path.write_text(SCRIPT)

    async def session() -> None:
        lsp = _Session()
        initialized = await lsp.start(root)
        assert initialized.server_info.name == "amplint"
        uri = lsp.open(path, SCRIPT)
        published = await lsp.diagnostics(uri)
        [diagnostic] = published.diagnostics
        assert (diagnostic.code, diagnostic.source) == ("AMP201", "amplint")
        # Line 3 (0-based 2), after `label = "🚀"; scaler = `: 22 characters,
        # 23 UTF-16 units.
        assert diagnostic.range.start == types.Position(line=2, character=23)

        [quick_fix] = await lsp.actions(uri, published.diagnostics)
        assert quick_fix.kind == types.CodeActionKind.QuickFix and quick_fix.is_preferred
        fixed = _applied(SCRIPT, quick_fix.edit.changes[uri])
        assert fixed == api.fix_source(SCRIPT, path).text
        assert "torch.amp.GradScaler(" in fixed and "🚀" in fixed

        # The editor applies it: the next analysis finds nothing.
        lsp.change(uri, 2, fixed)
        assert list((await lsp.diagnostics(uri)).diagnostics) == []

        # A change typed quickly after another: only the last text is analysed.
        lsp.change(uri, 3, SCRIPT + "x = 1\n")
        lsp.change(uri, 4, FP32_STEP)
        latest = await lsp.diagnostics(uri)
        assert latest.version == 4 and [d.code for d in latest.diagnostics] == ["AMP001"]
        [fix_all] = await lsp.actions(uri, [], only=[types.CodeActionKind.SourceFixAll])
        assert fix_all.kind == "source.fixAll.amplint"
        all_fixed = _applied(FP32_STEP, fix_all.edit.changes[uri])
        assert all_fixed == api.fix_source(FP32_STEP, path).text != FP32_STEP
        await lsp.stop()

    asyncio.run(session())


def test_the_server_reads_the_configuration_check_reads(tmp_path: Path) -> None:
    root = tmp_path
    (root / "pyproject.toml").write_text('[tool.amplint]\nignore = ["AMP201"]\n')
    path = root / "train.py"

    async def session() -> None:
        lsp = _Session()
        await lsp.start(root)
        uri = lsp.open(path, SCRIPT)
        assert list((await lsp.diagnostics(uri)).diagnostics) == []
        other = lsp.open(root / "notes.txt", SCRIPT)  # not Python: not analysed
        lsp.client.text_document_did_close(
            types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=other))
        )
        assert list((await lsp.diagnostics(other)).diagnostics) == []
        await lsp.stop()

    asyncio.run(session())


def test_the_api_gives_each_fix_as_edits_of_its_own_source(tmp_path: Path) -> None:
    path = _project(tmp_path) / "train.py"
    [finding] = api.check_source(SCRIPT, path)
    assert finding.code == "AMP201" and finding.range.start == api.Location(3, 23)
    assert finding.fix is not None and finding.fix.safe
    assert api.apply_edits(SCRIPT, finding.fix.edits) == api.fix_source(SCRIPT, path).text
    fixed = api.fix_source(SCRIPT, path)
    assert [f.code for f in fixed.fixed] == ["AMP201"] and fixed.remaining == ()
    with pytest.raises(api.ConfigError, match="select"):
        api.load_settings([path], select="NOPE")


def test_the_readme_api_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("### From Python: `amplint.api`", 1)[1]
    example = section.split("```python\n", 1)[1].split("```", 1)[0]
    (_project(tmp_path) / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text(SCRIPT)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(example, "README.md", "exec"), namespace)
    assert [f.code for f in namespace["fixed"].fixed] == ["AMP201"]
    assert [result.path for result in namespace["run"].files] == [Path("src/train.py")]
    assert [f.code for f in namespace["written"].files[0].fixed] == ["AMP201"]
    assert "torch.amp.GradScaler(" in (tmp_path / "src" / "train.py").read_text()


def test_without_pygls_the_server_says_what_to_install() -> None:
    hidden = (
        "import sys; sys.modules['pygls'] = None; sys.argv = ['amplint', 'server']; "
        "from amplint.launch import run; run()"
    )
    run = subprocess.run([sys.executable, "-c", hidden], capture_output=True, text=True)
    assert run.returncode == 2
    assert "amplint server needs pygls: pip install 'amplint[server]'" in run.stderr


def test_a_source_that_crashes_the_parser_costs_its_analysis_not_the_caller(
    tmp_path: Path,
) -> None:
    # An `or` of 8,000 terms overflows libcst's native parser: the worker
    # analysing it dies, the caller (the server) gets an error and goes on.
    deep = SCRIPT + "y = " + " or ".join(f"a{i}" for i in range(8000)) + "\n"
    path = _project(tmp_path) / "deep.py"
    with pytest.raises(api.AnalysisError, match="the process analysing this file died"):
        api.check_source(deep, path)
    assert [finding.code for finding in api.check_source(SCRIPT, path)] == ["AMP201"]


def test_the_cells_of_a_notebook_get_their_own_findings(tmp_path: Path) -> None:
    root = _project(tmp_path)
    notebook_uri = (root / "explore.ipynb").as_uri()
    cell_uris = [f"vscode-notebook-cell:{(root / 'explore.ipynb').as_posix()}#{n}" for n in "abc"]
    texts = [
        "# Training",
        "import torch\n%matplotlib inline\n",
        SCRIPT.replace("import torch\n", ""),
    ]
    kinds = [
        types.NotebookCellKind.Markup,
        types.NotebookCellKind.Code,
        types.NotebookCellKind.Code,
    ]

    async def session() -> None:
        lsp = _Session()
        await lsp.start(root)
        lsp.client.notebook_document_did_open(
            types.DidOpenNotebookDocumentParams(
                notebook_document=types.NotebookDocument(
                    uri=notebook_uri,
                    notebook_type="jupyter-notebook",
                    version=1,
                    cells=[
                        types.NotebookCell(kind=kind, document=uri)
                        for kind, uri in zip(kinds, cell_uris)
                    ],
                ),
                cell_text_documents=[
                    types.TextDocumentItem(
                        uri=uri,
                        language_id=(
                            "markdown" if kind == types.NotebookCellKind.Markup else "python"
                        ),
                        version=1,
                        text=text,
                    )
                    for uri, kind, text in zip(cell_uris, kinds, texts)
                ],
            )
        )
        published = {}
        while len(published) < 3:
            params = await asyncio.wait_for(lsp.published.get(), timeout=60)
            published[params.uri] = list(params.diagnostics)
        assert published[cell_uris[0]] == [] and published[cell_uris[1]] == []
        [diagnostic] = published[cell_uris[2]]
        # The third cell's own line 2 (0-based 1), after its 🚀: UTF-16 units.
        assert diagnostic.code == "AMP201"
        assert diagnostic.range.start == types.Position(line=1, character=23)
        # Its quick fix edits that cell, as `fix` rewrites it in the notebook.
        [quick_fix] = await lsp.actions(cell_uris[2], [diagnostic])
        assert quick_fix.is_preferred and list(quick_fix.edit.changes) == [cell_uris[2]]
        fixed_cell = _applied(texts[2], quick_fix.edit.changes[cell_uris[2]])
        assert "torch.amp.GradScaler(" in fixed_cell and "🚀" in fixed_cell
        assert fixed_cell.replace('torch.amp.GradScaler("cuda")', "X") == texts[2].replace(
            "torch.cuda.amp.GradScaler()", "X"
        )
        await lsp.stop()

    asyncio.run(session())


def test_the_readme_editor_set_ups_start_the_server_the_tests_drive() -> None:
    """Each editor's block in the README parses as its editor reads it and
    starts `amplint server`, the command these tests run."""
    import tomllib

    section = (REPO / "README.md").read_text(encoding="utf-8")
    section = section.split("### In the editor: `amplint server`", 1)[1].split("\n### ", 1)[0]
    found = re.findall(r"```(\w+)\n(.*?)```", section, re.S)
    lua = [body for language, body in found if language == "lua"]
    blocks = dict(found)
    assert sorted(blocks) == ["json", "lua", "toml"] and len(lua) == 2
    assert all('cmd = { "amplint", "server" }' in block for block in lua)
    helix = tomllib.loads(blocks["toml"])
    server = helix["language-server"]["amplint"]
    assert [server["command"], *server["args"]] == ["amplint", "server"]
    assert "amplint" in helix["language"][0]["language-servers"]
    vscode = json.loads(blocks["json"])
    assert [vscode["glspc.server.command"], *vscode["glspc.server.commandArguments"]] == [
        "amplint",
        "server",
    ]
    assert vscode["glspc.server.languageId"] == ["python"]


@pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"), reason="needs FIFOs")
def test_the_server_reads_only_what_the_client_opened_and_exits_0(tmp_path: Path) -> None:
    """`didSave` of a document the client never opened made pygls read it
    from disk: `/dev/zero` until memory ran out, a FIFO for ever (the whole
    server with it).  And a normal shutdown exited with status 1 and a
    traceback (the flush of a standard output the server had closed)."""
    import os

    root = _project(tmp_path)
    os.mkfifo(root / "fifo.py")
    (root / "zero.py").symlink_to("/dev/zero")

    async def scenario() -> tuple[int, int, bytes]:
        session = _Session()
        await session.start(root)
        for name in ("fifo.py", "zero.py"):
            session.client.text_document_did_save(
                types.DidSaveTextDocumentParams(
                    text_document=types.TextDocumentIdentifier(uri=(root / name).as_uri())
                )
            )
        uri = session.open(root / "train.py", FP32_STEP)
        published = await session.diagnostics(uri)  # not blocked behind the FIFO
        process = session.client._server
        await session.stop()
        status = await asyncio.wait_for(process.wait(), timeout=30)
        return len(published.diagnostics), status, await process.stderr.read()

    found, status, stderr = asyncio.run(scenario())
    assert found == 1
    assert status == 0 and b"Traceback" not in stderr, stderr


# Neovim's API as each block may find it: 0.11's `vim.lsp.config`/`enable`, and
# only what 0.7 already had (`nvim_create_autocmd`, `start_client`,
# `buf_attach_client`, `vim.fn.getcwd`); a call of anything else is a Lua error,
# as `E5113` was on Debian's 0.7.
NEOVIM_0_11 = """
calls = {}
vim = { lsp = {
  config = function(name, config) calls.config = { name = name, config = config } end,
  enable = function(name) calls.enable = name end,
} }
"""
NEOVIM_0_7 = """
calls = { attached = {}, started = 0 }
vim = {
  api = { nvim_create_autocmd = function(event, options) calls.autocmd = { event, options } end },
  fn = { getcwd = function() return "/project" end },
  lsp = {
    start_client = function(config) calls.started = calls.started + 1; calls.config = config; return 7 end,
    buf_attach_client = function(buffer, client) table.insert(calls.attached, { buffer, client }) end,
  },
}
"""


def test_each_readme_neovim_block_runs_on_the_neovim_it_names() -> None:
    lupa = pytest.importorskip("lupa")
    section = (REPO / "README.md").read_text(encoding="utf-8")
    section = section.split("### In the editor: `amplint server`", 1)[1].split("\n### ", 1)[0]
    new, old = re.findall(r"```lua\n(.*?)```", section, re.S)

    lua = lupa.LuaRuntime()
    lua.execute(NEOVIM_0_11 + new)
    calls = lua.globals().calls
    assert calls.config.name == "amplint" == calls.enable
    assert list(calls.config.config.cmd.values()) == ["amplint", "server"]
    assert list(calls.config.config.filetypes.values()) == ["python"]
    with pytest.raises(lupa.LuaError):
        lupa.LuaRuntime().execute(NEOVIM_0_7 + new)  # what 0.7 said with E5113

    lua = lupa.LuaRuntime()
    lua.execute(NEOVIM_0_7 + old)
    calls = lua.globals().calls
    event, options = calls.autocmd[1], calls.autocmd[2]
    assert (event, options.pattern) == ("FileType", "python")
    for buffer in (1, 2):  # two Python buffers: one server, both attached
        options.callback(lua.table_from({"buf": buffer}))
    assert calls.started == 1 and list(calls.config.cmd.values()) == ["amplint", "server"]
    assert [tuple(pair.values()) for pair in calls.attached.values()] == [(1, 7), (2, 7)]

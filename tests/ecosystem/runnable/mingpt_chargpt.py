"""karpathy/minGPT chargpt: a character-level GPT on a small generated text."""

REPO = "karpathy/minGPT"
PATH = "projects/chargpt/chargpt.py"
# The config overrides the script takes: a two-layer model (not gpt-mini's six),
# short blocks, a small batch, no DataLoader workers.
ARGV = (
    "--model.model_type=None",
    "--model.n_layer=2",
    "--model.n_head=2",
    "--model.n_embd=32",
    "--data.block_size=32",
    "--trainer.batch_size=8",
    "--trainer.num_workers=0",
)
# The mingpt package is the repository's own, imported from its root (two levels up).
ENV = {"PYTHONPATH": "../.."}
_WORDS = "O God, O God! how weary stale flat and unprofitable seem to me all the uses of this world".split()
# tinyshakespeare's place (the script samples from "O God, O God!" at step 0).
FILES = {
    "projects/chargpt/input.txt": "\n".join(
        " ".join(_WORDS[(line * 5 + column * 3) % len(_WORDS)] for column in range(10))
        for line in range(200)
    )
    + "\n",
}
STEPS = 10
# The training step is in the trainer the script drives.
REWRITE = ("mingpt/trainer.py",)

"""MorvanZhou/PyTorch-Tutorial 404: a dense autoencoder on MNIST (the stub's)."""

REPO = "MorvanZhou/PyTorch-Tutorial"
PATH = "tutorial-contents/404_autoencoder.py"
EDITS = (
    # The matplotlib stub has no mpl_toolkits; the 3D plot comes after training.
    ("from mpl_toolkits.mplot3d import Axes3D\n", "Axes3D = None\n"),
    # The stub's subplots returns None: the axes become pyplot, whose every call does nothing.
    (
        "f, a = plt.subplots(2, N_TEST_IMG, figsize=(5, 2))",
        "f, a = plt, [[plt] * N_TEST_IMG] * 2",
    ),
)
STEPS = 20  # four steps an epoch (the stub's 256 images), ten epochs

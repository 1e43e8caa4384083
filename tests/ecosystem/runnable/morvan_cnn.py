"""MorvanZhou/PyTorch-Tutorial 401: a CNN on MNIST (the stub's), one epoch."""

REPO = "MorvanZhou/PyTorch-Tutorial"
PATH = "tutorial-contents/401_CNN.py"
# numpy is not installed here: the plot takes the tensor, the test print (which
# turns predictions into numpy arrays) is left out, and the last prints show tensors.
EDITS = (
    (
        "plt.imshow(train_data.train_data[0].numpy(), cmap='gray')",
        "plt.imshow(train_data.train_data[0], cmap='gray')",
    ),
    ("        if step % 50 == 0:\n", "        if False:\n"),
    (
        "[1].data.numpy()\n"
        "print(pred_y, 'prediction number')\n"
        "print(test_y[:10].numpy(), 'real number')",
        "[1]\nprint(pred_y, 'prediction number')\nprint(test_y[:10], 'real number')",
    ),
)

"""pytorch/examples ddp-tutorial-series: DDP on one CPU process, as torchrun
would start it, with the gloo backend instead of NCCL."""

REPO = "pytorch/examples"
PATH = "distributed/ddp-tutorial-series/multigpu_torchrun.py"
ARGV = ("2", "10", "--batch_size", "32")  # total_epochs, save_every
ENV = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"}  # torchrun's; the runner sets MASTER_*
EDITS = (
    (
        'torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))\n'
        '    init_process_group(backend="nccl")',
        'init_process_group(backend="gloo")',
    ),
    # The rank stood for a CUDA device; the model, batches and DDP stay on the CPU.
    ('self.gpu_id = int(os.environ["LOCAL_RANK"])', 'self.gpu_id = "cpu"'),
    ("DDP(self.model, device_ids=[self.gpu_id])", "DDP(self.model)"),
)

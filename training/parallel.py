"""Data-parallel training of one run over several processes (torchrun), and the command that launches them.

Under `torchrun --nproc-per-node N` each process is one rank. Every rank draws the *whole* global batch
from the run's seeded stream and trains on its own slice of rows (rank r takes rows r*B/N .. (r+1)*B/N),
so the data, the stream state in a checkpoint and hence the run are the same for any N: a run started
on 2 processes can resume on 1 or 4. Gradients are averaged by DistributedDataParallel (gloo on CPU,
NCCL on CUDA); the trainer weights each rank's loss so that the average is the gradient of the global
batch's mean loss. Rank 0 alone writes the run directory.

Run alone (no torchrun environment), `Ranks.start` returns the single rank 0 of 1 and nothing here
does any communication. Launched by torchrun, even as one process, the ranks form a process group and train
through DistributedDataParallel, so `torchrun --nproc-per-node 1` runs the same code (and NCCL) as N GPUs do.
"""

from __future__ import annotations

import inspect
import os
import sys
from dataclasses import dataclass
from typing import Sequence

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Ranks:
    """This process's place among the processes training one run."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0  # index on this machine: the CUDA device of this rank
    owns_group: bool = False  # the process group was started here (and is stopped by `stop`)
    launched: bool = False  # started by torchrun (its TORCHELASTIC_RUN_ID is set), whatever the number of processes

    @property
    def main(self) -> bool:
        """Rank 0: the one that writes the run directory, logs and shows progress."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        """Training goes through a process group and DistributedDataParallel (several processes, or torchrun's one)."""
        return self.size > 1 or self.owns_group

    @property
    def backend(self) -> str | None:
        """The process group's backend ("nccl", "gloo"), None when training alone."""
        return dist.get_backend() if self.distributed and dist.is_initialized() else None

    @staticmethod
    def from_env() -> "Ranks":
        """The ranks torchrun announces in RANK / WORLD_SIZE / LOCAL_RANK; rank 0 of 1 without them."""
        size = int(os.environ.get("WORLD_SIZE", "1"))
        return Ranks(int(os.environ.get("RANK", "0")), size, int(os.environ.get("LOCAL_RANK", "0")),
                     launched="TORCHELASTIC_RUN_ID" in os.environ)

    @staticmethod
    def start(device: torch.device) -> "Ranks":
        """Join (or start) the process group of a torchrun launch: NCCL for CUDA devices, else gloo."""
        ranks = Ranks.from_env()
        if ranks.size == 1 and not ranks.launched:
            return ranks
        if dist.is_initialized():  # the caller started it
            return Ranks(dist.get_rank(), dist.get_world_size(), ranks.local_rank, launched=ranks.launched)
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
        return Ranks(dist.get_rank(), dist.get_world_size(), ranks.local_rank, owns_group=True, launched=True)

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    def sum(self, value: torch.Tensor) -> torch.Tensor:
        """`value` summed over the ranks (a copy; itself when alone)."""
        if not self.distributed:
            return value
        total = value.detach().clone()
        dist.all_reduce(total)
        return total

    def rows(self, batch_size: int) -> slice:
        """This rank's rows of a global batch of `batch_size` rows."""
        if batch_size % self.size:
            raise ValueError(f"batch_size={batch_size} must be divisible by the number of processes ({self.size})")
        part = batch_size // self.size
        return slice(self.rank * part, (self.rank + 1) * part)

    def stop(self) -> None:
        if self.owns_group and dist.is_initialized():
            dist.destroy_process_group()


def local_device(name: str, ranks: Ranks) -> str:
    """The device a rank trains on: "auto" and "cuda" mean this rank's own GPU (cuda:LOCAL_RANK) under torchrun."""
    if (ranks.size > 1 or ranks.launched) and name in ("auto", "cuda") and torch.cuda.is_available():
        return f"cuda:{ranks.local_rank}"
    return name


def ddp_options(device: torch.device) -> dict:
    """DistributedDataParallel's keyword arguments: this rank's GPU, and no buffer broadcast before each
    forward (the buffers, mixing matrices and rotary tables, are seeded alike on every rank)."""
    options: dict = {"device_ids": [device.index]} if device.type == "cuda" else {}
    from torch.nn.parallel import DistributedDataParallel

    new_name = "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters  # torch >= 2.13
    options["forward_sync_buffers" if new_name else "broadcast_buffers"] = False
    return options


def torchrun_command(nproc: int, module_argv: Sequence[str]) -> list[str]:
    """The command that runs `python -m MODULE ARGS...` (module_argv) on `nproc` local processes with torchrun."""
    if nproc < 1:
        raise ValueError(f"nproc={nproc} must be >= 1")
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            "-m", *module_argv]

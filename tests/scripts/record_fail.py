"""A torchrun-style script: torch's @record writes the exception to TORCHELASTIC_ERROR_FILE."""

from torch.distributed.elastic.multiprocessing.errors import record


@record
def main() -> None:
    raise RuntimeError("recorded boom")


main()

"""torchrun style: torch's @record writes main's ValueError to TORCHELASTIC_ERROR_FILE; the script catches it and
exits 3."""

import sys

from torch.distributed.elastic.multiprocessing.errors import record


@record
def main() -> None:
    raise ValueError("the value torch recorded")


try:
    main()
except ValueError:
    sys.exit(3)

"""``python -m privlm``: the command line, also under ``torchrun -m privlm``."""

from privlm.cli import main

main()

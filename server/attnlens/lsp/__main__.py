"""``python -m attnlens.lsp``: the language server over stdio."""

import sys

from .cli_cmds import main

sys.exit(main())

import sys

from ferromq.cli import main

sys.exit(main())

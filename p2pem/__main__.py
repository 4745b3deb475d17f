import sys

from p2pem.cli import main

sys.exit(main())

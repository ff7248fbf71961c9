import sys

from fleetwatch.cli import main

sys.exit(main())

import sys

from fleetwatch.cli import main, single_threaded_blas

single_threaded_blas()
sys.exit(main())

import sys

from orchestrate.main import main

sys.exit(main())

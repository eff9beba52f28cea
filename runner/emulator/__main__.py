import sys

from runner.emulator.launch import main

sys.exit(main())

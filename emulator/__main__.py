import sys

from emulator.launch import main

sys.exit(main())

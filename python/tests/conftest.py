import os
import sys

# run against the source tree's package (the built extension is installed next to it by maturin
# develop, or importable from site-packages when the wheel is installed)

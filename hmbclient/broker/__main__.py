"""``python -m hmbclient.broker``: see ``hmbclient.broker.main``."""

import logging
import sys

from hmbclient.broker.main import main

if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    sys.exit(main())

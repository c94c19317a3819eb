"""``python -m hmbclient.broker``: see ``hmbclient.broker.runner``."""

import logging
import sys

from hmbclient.broker.runner import main

if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    sys.exit(main())

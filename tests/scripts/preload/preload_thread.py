"""A module that starts a thread when imported: the zygote must refuse to fork."""

import threading
import time

threading.Thread(target=time.sleep, args=(3600,), daemon=True, name="started-at-import").start()

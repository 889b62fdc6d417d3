"""Several processes and nodes: start-up (`initialize`), split fits (`run`), and a launcher.

``python -m solvers.distributed.launch -n K script.py`` starts K local processes that
`initialize` and `run` recognise, as ``srun`` and ``mpirun`` ones are.
"""

from ._initialize import initialize as initialize
from ._launch_info import Launch as Launch
from ._run import run as run
from ._transport import Transport as Transport
from ._transport import WorkerLost as WorkerLost

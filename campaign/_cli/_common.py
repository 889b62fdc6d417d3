"""The names every command shared, by their earlier module: _exits.py (exit codes, `BadInput`),
_logging.py, _options.py (click decorators), _reading.py (ledger reading) and _format.py
(times, durations, rates, counts) own them now."""

from ._exits import EXIT_FAILED as EXIT_FAILED
from ._exits import EXIT_LEDGER_WRITE as EXIT_LEDGER_WRITE
from ._exits import EXIT_OK as EXIT_OK
from ._exits import EXIT_SIGINT as EXIT_SIGINT
from ._exits import EXIT_SIGTERM as EXIT_SIGTERM
from ._exits import EXIT_USAGE as EXIT_USAGE
from ._exits import BadInput as BadInput
from ._exits import LedgerWriteFailed as LedgerWriteFailed
from ._exits import cli_words as cli_words
from ._format import duration as duration
from ._format import plural as plural
from ._format import rate as rate
from ._format import timestamp as timestamp
from ._options import ledger_argument as ledger_argument
from ._options import verbose_option as verbose_option
from ._options import with_errors as with_errors
from ._reading import read_ledger as read_ledger
from ._reading import scan_ledger as scan_ledger

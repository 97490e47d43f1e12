"""Exit 2 with one line unless PREFECT_API_URL is set and its server answers: without it a Prefect
worker silently starts its own temporary server and never sees the runs of yours."""

import os
import sys
import urllib.error
import urllib.request

api = os.environ.get("PREFECT_API_URL", "").rstrip("/")
if not api:
    print(
        f"{sys.argv[1]}: error: PREFECT_API_URL is not set in this shell; export it to your server's API "
        f"(e.g. export PREFECT_API_URL=http://127.0.0.1:4200/api) in every shell that runs a worker or deploys",
        file=sys.stderr,
    )
    sys.exit(2)
try:
    urllib.request.urlopen(f"{api}/health", timeout=10).close()
except (urllib.error.URLError, OSError) as e:
    print(
        f"{sys.argv[1]}: error: the Prefect server at PREFECT_API_URL={api} does not answer "
        f"({getattr(e, 'reason', e)}); start it (prefect server start) or fix the URL",
        file=sys.stderr,
    )
    sys.exit(2)

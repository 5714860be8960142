import sys

try:  # Ctrl-C or SIGTERM while Python is still importing: leave quietly, nothing was written yet
    from deploycc.cli.main import main
except KeyboardInterrupt:
    sys.exit(130)

main()

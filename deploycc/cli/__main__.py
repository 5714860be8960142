from deploycc.cli.main import main

main()

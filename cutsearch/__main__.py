from cutsearch.cli import main

main()

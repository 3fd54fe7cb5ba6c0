from tracelint.cli import main

main()

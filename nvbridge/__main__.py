from nvbridge.cli import main

main()

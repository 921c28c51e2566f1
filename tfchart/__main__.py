from tfchart.cli.app import main

main()

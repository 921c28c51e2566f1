from tfchart.cli import main

main()

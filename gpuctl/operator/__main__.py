from gpuctl.operator.main import main

main()

// detfuse: the command-line front end (see cli/README.md).
#include <iostream>

#include "cli/cli.h"

int main(int argc, char** argv) { return detfuse::cli::run_cli(argc, argv, std::cout, std::cerr); }

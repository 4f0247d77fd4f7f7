// ferry-serve --model-dir DIR: scores samples over HTTP with the newest version of an export
// directory and follows it as training publishes new versions (docs/serving.md).
#include "tools/serve/cli.h"

int main(int argc, char** argv) {
  return ferry::serve::ServeMain(argc, argv);
}

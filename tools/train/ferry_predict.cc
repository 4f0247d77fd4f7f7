// ferry-predict MODEL FILE...: one probability per line for every sample of FILE, with a model
// ferry-train exported (--model-out). Runs in one process; no parameter server.
#include "tools/train/cli.h"

int main(int argc, char** argv) {
  return ferry::train::PredictMain(argc, argv);
}

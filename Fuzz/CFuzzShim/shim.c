// Intentionally empty: SwiftPM needs at least one source file in a C target.
#include "shim.h"

// (being written)
#include "engine/kernels/swiglu_fp8.h"

// (being written) Contract: swiglu_fp8.h.
#include "engine/kernels/swiglu_fp8.h"

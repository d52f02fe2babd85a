// (being written)
#include "engine/kernels/rms_norm_fp8.h"

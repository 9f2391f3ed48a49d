// Umbrella header of the C++ API.
#pragma once
#include "hopattn/api.hpp"
#include "hopattn/error.hpp"
#include "hopattn/params.hpp"
#include "hopattn/quantize.hpp"
#include "hopattn/types.hpp"

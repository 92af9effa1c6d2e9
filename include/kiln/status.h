// Status and Result<T> for the public API (the definitions live in core/status.h).
#pragma once
#include "core/status.h"

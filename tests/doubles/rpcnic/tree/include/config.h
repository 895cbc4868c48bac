// Fake config.h (the real one holds the metadata structs and wire-type codes).
#pragma once

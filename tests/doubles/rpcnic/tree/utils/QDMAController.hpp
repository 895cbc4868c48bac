// Fake QDMAController.hpp (the real one drives the QDMA BARs and the hugepage DMA pool).
#pragma once

// Fake: the real tree includes benchN_testclass.h and benchN_target.inc for the BENCHN defined.
#pragma once

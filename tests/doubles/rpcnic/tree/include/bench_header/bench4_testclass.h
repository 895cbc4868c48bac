// Fake bench4_testclass.h: the real one holds the generated message classes.
#pragma once

// The shortest decimal that reads back as a given double, from Dragonbox
// (Junekey Jeon, 2020; Debian's libdragonbox-dev, header-only), behind a C
// interface: the one C++ translation unit of the daemon, compiled without
// exceptions or RTTI so it needs no C++ runtime. Formatting the digits is C
// (dtoa.c): this file only finds them.
#include <dragonbox/dragonbox.h>

#include <cstdint>

extern "C" void es_shortest_decimal(double v, std::uint64_t *digits, int *exp10);

// See core.h. v finite and nonzero; its sign is ignored.
extern "C" void es_shortest_decimal(double v, std::uint64_t *digits, int *exp10)
{
    auto d = jkj::dragonbox::to_decimal(v, jkj::dragonbox::policy::sign::ignore);
    *digits = d.significand;
    *exp10 = d.exponent;
}

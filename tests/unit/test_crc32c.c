/* test_crc32c.c - CRC-32C known vectors, hardware vs software, chaining. */
#include "common/crc32c.h"
#include "check.h"

#include <stdlib.h>
#include <string.h>

struct vector {
	const char *what;
	unsigned char data[48];
	size_t len;
	uint32_t crc;
};

static void fill_vectors(struct vector *v)
{
	/* RFC 3720 (iSCSI) appendix B.4 and the classic check value. */
	v[0] = (struct vector){ "\"123456789\"", "123456789", 9, 0xe3069283u };
	v[1] = (struct vector){ "32 x 0x00", { 0 }, 32, 0x8a9136aau };
	v[2] = (struct vector){ "32 x 0xff", { 0 }, 32, 0x62a8ab43u };
	memset(v[2].data, 0xff, 32);
	v[3] = (struct vector){ "0..31", { 0 }, 32, 0x46dd794eu };
	for (int i = 0; i < 32; i++)
		v[3].data[i] = (unsigned char)i;
	v[4] = (struct vector){ "31..0", { 0 }, 32, 0x113fdb5cu };
	for (int i = 0; i < 32; i++)
		v[4].data[i] = (unsigned char)(31 - i);
	v[5] = (struct vector){ "empty", { 0 }, 0, 0 };
}

int main(void)
{
	struct vector v[6];
	unsigned char *buf = malloc(1 << 16);
	int hw = crc32c_hw_available();

	fill_vectors(v);
	for (int i = 0; i < 6; i++) {
		if (crc32c_sw(0, v[i].data, v[i].len) != v[i].crc)
			fprintf(stderr, "software CRC of %s wrong\n", v[i].what);
		CHECK_EQ(crc32c_sw(0, v[i].data, v[i].len), v[i].crc);
		CHECK_EQ(crc32c(0, v[i].data, v[i].len), v[i].crc);
		if (hw)
			CHECK_EQ(crc32c_hw(0, v[i].data, v[i].len), v[i].crc);
	}
	if (!hw)
		printf("note: no SSE4.2 on this CPU; hardware path not tested\n");

	/* Every length and alignment up to a few words, and chaining. */
	srand(7);
	for (int i = 0; i < (1 << 16); i++)
		buf[i] = (unsigned char)rand();
	for (size_t off = 0; off < 9; off++) {
		for (size_t len = 0; len < 300; len++) {
			uint32_t sw = crc32c_sw(0, buf + off, len);
			size_t cut = len / 3;

			if (hw)
				CHECK_EQ(crc32c_hw(0, buf + off, len), sw);
			CHECK_EQ(crc32c(crc32c(0, buf + off, cut), buf + off + cut, len - cut), sw);
		}
	}
	if (hw)
		CHECK_EQ(crc32c_hw(0, buf, 1 << 16), crc32c_sw(0, buf, 1 << 16));
	/* The three-lane path (3 x 4 KiB rounds) at lengths and offsets around
	 * its edges, started from a non-zero CRC. */
	for (size_t off = 0; hw && off < 9; off += 4) {
		size_t lens[] = { 12287, 12288, 12289, 12288 + 8, 24576 - 1, 24576, 24576 + 7,
				  40000, (1 << 16) - 9 };

		for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++)
			CHECK_EQ(crc32c_hw(0x1234567u, buf + off, lens[i] - off),
				 crc32c_sw(0x1234567u, buf + off, lens[i] - off));
	}
	/* Combining two CRCs equals the CRC of the bytes joined, at every
	 * split, including the empty ends. */
	for (size_t len = 0; len < 5000; len += len < 40 ? 1 : 997) {
		uint32_t whole = crc32c(0, buf, len);

		for (size_t cut = 0; cut <= len; cut += cut < 20 ? 1 : 311)
			CHECK_EQ(crc32c_combine(crc32c(0, buf, cut), crc32c(0, buf + cut, len - cut),
						len - cut), whole);
	}
	CHECK_EQ(crc32c_combine(crc32c(0, buf, 48), crc32c(0, buf + 48, (1 << 16) - 48),
				(1 << 16) - 48), crc32c(0, buf, 1 << 16));
	/* A single flipped bit changes the CRC. */
	{
		uint32_t before = crc32c(0, buf, 4096);

		buf[1234] ^= 0x10;
		CHECK(crc32c(0, buf, 4096) != before);
	}
	free(buf);
	return check_result("crc32c");
}

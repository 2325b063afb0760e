/* cmd_config.c - subcommands about Stasis itself: config, faults. */
#include "cli/cli.h"
#include "common/config.h"
#include "common/err.h"
#include "common/fault.h"

#include <stdio.h>
#include <string.h>

int cmd_config(int argc, char **argv)
{
	enum cfg_key key;

	if (argc == 2 && strcmp(argv[1], "--list") == 0) {
		printf("%-15s %-32s %s\n", "KEY", "VALUE", "FROM");
		for (int i = 0; i < CFG__COUNT; i++)
			printf("%-15s %-32s %s\n", cfg_name(i), cfg_str(i), cfg_origin(i));
		return EXIT_OK;
	}
	if (argc == 2 && argv[1][0] != '-') {
		if (cfg_lookup(argv[1], &key)) {
			cli_error("config", "%s", err_msg());
			return EXIT_USAGE;
		}
		printf("%s\n", cfg_str(key));
		return EXIT_OK;
	}
	return cli_usage(cli_find("config"), 1);
}

int cmd_faults(int argc, char **argv)
{
	(void)argv;
	if (argc != 1)
		return cli_usage(cli_find("faults"), 1);
	for (int i = 0; i < FAULT__COUNT; i++)
		printf("%-20s %s\n", fault_name(i), fault_description(i));
	return EXIT_OK;
}
